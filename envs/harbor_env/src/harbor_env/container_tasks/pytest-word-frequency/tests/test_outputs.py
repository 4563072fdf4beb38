import random
import subprocess


def test_fixed(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("The cat; the DOG. the cat! a b")
    out = subprocess.run(["/app/wordfreq", str(p)], capture_output=True, text=True, timeout=30).stdout
    assert out.split("\n")[:3] == ["the 3", "cat 2", "a 1"]


def test_fresh(tmp_path):
    words = {"alpha": 7, "beta": 5, "gamma": 9, "delta": 1}
    seq = [w for w, n in words.items() for _ in range(n)]
    random.shuffle(seq)
    p = tmp_path / "b.txt"
    p.write_text(", ".join(seq))
    out = subprocess.run(["/app/wordfreq", str(p)], capture_output=True, text=True, timeout=30).stdout
    assert out.split("\n")[:3] == ["gamma 9", "alpha 7", "beta 5"]
