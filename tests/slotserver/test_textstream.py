"""Stop strings, withheld partial matches, the n_indent rule and UTF-8 pieces (no model)."""

from slotserver.textstream import TextStream


def test_stop_string_cuts_the_text_and_names_the_word():
    ts = TextStream(["END"])
    assert not ts.push(b"hello E")
    assert ts.push(b"ND more")
    assert ts.text == "hello " and ts.stopping_word == "END"


def test_partial_stop_match_is_withheld_while_streaming():
    ts = TextStream(["###"])
    ts.push(b"abc#")
    assert ts.take(final=False) == "abc"  # '#' may start '###'
    ts.push(b"x")
    assert ts.take(final=False) == "#x"


def test_stop_split_across_many_pieces():
    ts = TextStream(["</s>"])
    for piece in (b"a<", b"/", b"s", b">b"):
        stopped = ts.push(piece)
    assert stopped and ts.text == "a"


def test_multibyte_character_split_over_tokens():
    ts = TextStream([])
    data = "é".encode()
    ts.push(data[:1])
    assert ts.take(final=False) == ""
    ts.push(data[1:])
    assert ts.take(final=False) == "é"


def test_n_indent_stops_at_a_less_indented_line():
    ts = TextStream([], n_indent=4)
    assert not ts.push(b"x = 1\n    y = 2\n")
    assert not ts.push(b"  ")  # only whitespace so far: undecided
    assert ts.push(b"z")
    assert ts.text == "x = 1\n    y = 2\n"
