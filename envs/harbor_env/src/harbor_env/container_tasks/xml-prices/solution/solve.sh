#!/bin/bash
set -e
xmlstarlet sel -t -m '//book[price>20]' -v title -n /app/catalog.xml > /app/expensive.txt
