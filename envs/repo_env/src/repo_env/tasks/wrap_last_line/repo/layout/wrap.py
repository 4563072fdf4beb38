"""Greedy word wrapping."""


def wrap(text, width):
    lines, cur = [], ""
    for word in text.split():
        if len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    return lines
