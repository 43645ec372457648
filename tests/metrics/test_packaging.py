"""The shipped files parse and agree: generated dashboards, Grafana provisioning, compose, Containerfile.

No container runtime runs here (no daemon, no registry images), so the Containerfile is checked with
BuildKit's own parser (the ``dockerfile`` package) and the compose file with a YAML parser.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import dockerfile
import yaml

from slotserver.api.hosts import HostAllowlist
from slotserver.flags.command_line import build_parser, config_from_args

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"


def load_build():
    spec = importlib.util.spec_from_file_location("dashboards_build", DASHBOARDS / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dashboards_are_generated_by_build_py():
    build = load_build()
    for name, board in (("slotserver-overview.json", build.overview()),
                        ("slotserver-speculative.json", build.speculative())):
        assert json.loads((DASHBOARDS / name).read_text()) == board, f"run python dashboards/build.py ({name})"


def test_dashboards_use_the_datasource_variable():
    for path in DASHBOARDS.glob("*.json"):
        board = json.loads(path.read_text())
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids))
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                assert target["datasource"]["uid"] == "${datasource}"
                assert 'instance=~"$instance"' in target["expr"]


def test_compose_and_provisioning_agree():
    compose = yaml.safe_load((DASHBOARDS / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"server", "prometheus", "grafana"}
    assert (DASHBOARDS / services["server"]["build"]["context"] / services["server"]["build"]["dockerfile"]).is_file()
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DASHBOARDS / source).exists(), volume
    prometheus = yaml.safe_load((DASHBOARDS / "prometheus.yml").read_text())
    assert prometheus["scrape_configs"][0]["static_configs"][0]["targets"] == ["server:8080"]
    # The server answers a scrape that names it by its service name (the Host allowlist).
    config = config_from_args(build_parser().parse_args(services["server"]["command"][1:]))
    assert HostAllowlist.from_config(config.host, config.allowed_hosts).allows("server:8080")
    provisioning = DASHBOARDS / "grafana" / "provisioning"
    datasource = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"][0]
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((provisioning / "dashboards" / "slotserver.yaml").read_text())["providers"][0]
    mounted = [v.split(":")[1] for v in services["grafana"]["volumes"] if v.split(":")[0].endswith(".json")]
    assert sorted(Path(m).name for m in mounted) == sorted(p.name for p in DASHBOARDS.glob("*.json"))
    assert all(m.startswith(provider["options"]["path"] + "/") for m in mounted)


def test_containerfile():
    commands = dockerfile.parse_file(str(ROOT / "Containerfile"))
    by_cmd: dict[str, list] = {}
    for c in commands:
        by_cmd.setdefault(c.cmd, []).append(c)
    assert by_cmd["ARG"][0].value[0].startswith("BASE=python:") and by_cmd["ARG"][0].value[0].endswith("-slim")
    assert [c.value[0] for c in by_cmd["FROM"]] == ["${BASE}", "${BASE}"]
    runs = " ".join(" ".join(c.value) for c in by_cmd["RUN"])
    assert "build-essential" in runs and "cmake" in runs and "pip install" in runs and "useradd" in runs
    assert by_cmd["USER"][-1].value[0] not in ("root", "0")
    assert by_cmd["EXPOSE"][0].value == ("8080",)
    assert set(by_cmd["VOLUME"][0].value) == {"/models", "/cache"}
    health = " ".join(by_cmd["HEALTHCHECK"][0].value)
    assert "/health" in health and "python" in health and "curl" not in health
    cmd = by_cmd["CMD"][-1]
    assert cmd.json and list(cmd.value) == ["slotserver", "--host", "0.0.0.0", "--port", "8080", "--metrics"]
