from tally import initials, pad, title_words


def test_pad():
    assert pad("ab", 4) == "ab  "


def test_pad_fill():
    assert pad("ab", 5, ".") == "ab..."


def test_pad_long():
    assert pad("abcdef", 3) == "abcdef"


def test_initials():
    assert initials("ada lovelace") == "AL"


def test_initials_spaces():
    assert initials("  grace   hopper ") == "GH"


def test_title_words():
    assert title_words("the art of war") == "The Art of War"


def test_title_words_all():
    assert title_words("the art of war", keep_small=False) == "The Art Of War"
