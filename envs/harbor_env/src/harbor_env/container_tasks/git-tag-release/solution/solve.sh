#!/bin/bash
set -e
cd /app/repo && git -c user.name=a -c user.email=a@b tag -a v1.2.0 -m v1.2.0 $(git log --format=%H --grep='^release:')
