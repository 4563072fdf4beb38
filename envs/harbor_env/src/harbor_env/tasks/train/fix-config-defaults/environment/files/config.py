import json


def load(path):
    with open(path) as f:
        data = json.load(f)
    port = data["port"]
    if not isinstance(port, int):
        raise ValueError("port must be an integer")
    return {"host": data["host"], "port": port, "debug": data["debug"]}
