def pad(text, width, fill=" "):
    """text padded on the right to width characters."""
    if len(text) >= width:
        return text
    return text + fill * (width - len(text))


def initials(name):
    """The upper-cased first letters of the name's words."""
    return "".join(word[0].upper() for word in name.split() if word)


def title_words(text, keep_small=True):
    """Words capitalised, small words kept lower case unless first."""
    small = {"a", "an", "of", "the"}
    out = []
    for i, word in enumerate(text.split()):
        if keep_small and i > 0 and word in small:
            out.append(word)
        else:
            out.append(word[:1].upper() + word[1:])
    return " ".join(out)
