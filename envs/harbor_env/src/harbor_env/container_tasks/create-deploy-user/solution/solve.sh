#!/bin/bash
set -e
useradd -m -d /home/deploy -s /bin/bash deploy && usermod -aG www-data deploy
