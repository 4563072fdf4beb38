"""URL slugs."""


def slugify(title):
    """'Hello, World' -> 'hello-world'."""
    out = []
    for ch in title.lower():
        if ch.isascii() and ch.isalnum():
            out.append(ch)
        else:
            out.append("-")
    return "".join(out)
