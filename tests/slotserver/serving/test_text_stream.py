"""Stop strings, withheld partial matches, the n_indent rule and UTF-8 pieces (no model)."""

from slotserver.serving.text_stream import TextStream


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


def test_earliest_starting_stop_wins_even_if_it_ends_later():
    ts = TextStream(["bc", "abcd"])
    assert ts.push(b"xabcdy")
    assert ts.text == "x" and ts.stopping_word == "abcd"  # "bc" ends first but starts later


def test_stops_starting_at_the_same_place_resolve_in_list_order():
    for stops, word in ((["ab", "a"], "ab"), (["a", "ab"], "a")):
        ts = TextStream(stops)
        assert ts.push(b"xab") and ts.text == "x" and ts.stopping_word == word


def test_a_stop_can_start_in_text_already_sent():
    ts = TextStream(["<|end|>"])
    ts.push(b"hi <|e")
    assert ts.take(final=False) == "hi "
    assert ts.push(b"nd|> trailing")
    assert ts.text == "hi " and ts.take(final=True) == ""


def test_withheld_text_is_only_the_longest_partial_stop():
    ts = TextStream(["abab", "xyz"])
    ts.push(b"ab ab")
    assert ts.take(final=False) == "ab "  # "ab" may start "abab"
    ts.push(b"a")  # "aba": its suffix "aba" may still start "abab"
    assert ts.take(final=False) == ""
    ts.push(b"c")
    assert ts.take(final=False) == "abac"


def test_partial_stop_after_an_indent_cut_is_about_the_cut_text():
    ts = TextStream(["\n\n"], n_indent=2)
    ts.push(b"  a\n")
    assert ts.take(final=False) == "  a"  # "\n" may start "\n\n"
    assert ts.push(b"b")  # a line indented less than 2: the text is cut after the newline
    assert ts.text == "  a\n" and ts.take(final=False) == ""  # still withheld: the cut text ends in "\n"
    assert ts.take(final=True) == "\n"


def test_stop_made_of_multibyte_characters_split_over_tokens():
    ts = TextStream(["é!"])
    data = "aé!".encode()
    assert not ts.push(data[:2])
    assert not ts.push(data[2:3])
    assert ts.push(data[3:]) and ts.text == "a"
