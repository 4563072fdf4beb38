"""Reading CSV lines (without the csv module)."""


def split_row(line):
    return [field.strip('"') for field in line.rstrip("\n").split(",")]


def to_records(lines):
    header = split_row(lines[0])
    return [dict(zip(header, split_row(line))) for line in lines[1:] if line.strip()]
