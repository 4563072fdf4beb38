import subprocess


def run(n):
    code = f'import sys; sys.path.insert(0, "/app"); from fizzbuzz import fizzbuzz; print(fizzbuzz({n}))'
    return subprocess.run(["python3", "-c", code], capture_output=True, text=True, timeout=30).stdout.strip()


def test_multiples():
    assert [run(n) for n in (3, 5, 15, 30, 9)] == ["Fizz", "Buzz", "FizzBuzz", "FizzBuzz", "Fizz"]


def test_others():
    assert [run(n) for n in (1, 7, 22)] == ["1", "7", "22"]
