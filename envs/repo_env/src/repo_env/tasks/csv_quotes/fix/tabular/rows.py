"""Reading CSV lines (without the csv module)."""


def split_row(line):
    line = line.rstrip("\n")
    fields, cur, quoted, i = [], [], False, 0
    while i < len(line):
        ch = line[i]
        if quoted:
            if ch == '"' and line[i + 1 : i + 2] == '"':
                cur.append('"')
                i += 1
            elif ch == '"':
                quoted = False
            else:
                cur.append(ch)
        elif ch == '"':
            quoted = True
        elif ch == ",":
            fields.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    fields.append("".join(cur))
    return fields


def to_records(lines):
    header = split_row(lines[0])
    return [dict(zip(header, split_row(line))) for line in lines[1:] if line.strip()]
