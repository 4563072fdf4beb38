#!/bin/sh
python3 /opt/login.py &
exec "$@"
