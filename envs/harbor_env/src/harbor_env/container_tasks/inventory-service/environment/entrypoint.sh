#!/bin/sh
python3 /opt/service.py &
exec "$@"
