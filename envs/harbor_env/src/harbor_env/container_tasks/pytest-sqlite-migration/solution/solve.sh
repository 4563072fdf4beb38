#!/bin/bash
set -e
sqlite3 /app/app.db "alter table users add column email text; update users set email = name || '@example.com';"
