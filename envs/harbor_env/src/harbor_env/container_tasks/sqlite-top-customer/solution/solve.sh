#!/bin/bash
set -e
sqlite3 /app/shop.db 'select customer from orders group by customer order by sum(amount) desc limit 1' > /app/top.txt
