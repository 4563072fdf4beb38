#!/bin/bash
set -e
printf '/var/log/shop/*.log {\n    daily\n    rotate 7\n    compress\n    missingok\n}\n' > /etc/logrotate.d/shop
