set -e
git init -q -b main /app/repo
cd /app/repo
for i in $(seq 1 12); do if [ $i -ge 7 ]; then v=0; else v=1; fi; printf '#!/bin/sh\n[ %s = 1 ]\n' $v > check.sh; chmod +x check.sh; echo $i > n.txt; git add -A; git -c user.name=dev -c user.email=dev@example.com commit -qm "step $i"; done
