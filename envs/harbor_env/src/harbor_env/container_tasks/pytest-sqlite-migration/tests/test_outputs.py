import sqlite3


def test_column_and_values():
    db = sqlite3.connect("/app/app.db")
    cols = [r[1] for r in db.execute("pragma table_info(users)")]
    assert cols == ["id", "name", "email"]
    rows = db.execute("select name, email from users order by id").fetchall()
    assert rows == [("ann", "ann@example.com"), ("bo", "bo@example.com"), ("cy", "cy@example.com")]
