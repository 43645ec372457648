"""The cluster's application and command line, without starting Ray: the Serve config file in
deploy/ validates against Ray Serve's own schema and builds; bad flags fail before Ray starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from slotserver.cluster.app import app_builder, build_app
from slotserver.cluster.command import parse

ROOT = Path(__file__).resolve().parents[3]


def test_the_serve_config_file_validates_and_builds():
    schema = ServeDeploySchema.model_validate(yaml.safe_load((ROOT / "deploy" / "ray-serve.yaml").read_text()))
    app = schema.applications[0]
    assert app.import_path == "slotserver.cluster.app:app_builder"
    built = app_builder(app.args)
    assert type(built).__name__ == "Application"


def test_builder_args_are_checked():
    with pytest.raises(ValueError, match="unknown slotserver cluster args: replicaz"):
        app_builder({"replicaz": 3})


def test_server_flags_are_checked_before_ray_starts():
    with pytest.raises(SystemExit):
        build_app(["--spec-type", "no-such-drafter"])
    with pytest.raises(ValueError):
        build_app(["--spec-draft-p-min", "2"])


def test_the_command_takes_its_own_flags_and_passes_the_rest_to_every_replica():
    own, rest = parse(["--replicas", "3", "--port", "9000", "-c", "4096", "-np", "2", "--spec-type", "suffix"])
    assert (own.replicas, own.port, own.host, own.ray_address) == (3, 9000, "127.0.0.1", "local")
    assert rest == ["-c", "4096", "-np", "2", "--spec-type", "suffix"]
    # a server flag that starts like one of ours stays the server's (no abbreviations)
    own, rest = parse(["--metrics", "--metrics-sd-dir", "/tmp/sd", "--max", "4"])
    assert own.metrics_sd_dir == "/tmp/sd" and own.max_replicas is None and rest == ["--metrics", "--max", "4"]
    with pytest.raises(SystemExit):
        parse(["--replicas", "0"])
    with pytest.raises(SystemExit):
        parse(["--min-replicas", "3", "--max-replicas", "2"])
