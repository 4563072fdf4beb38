set -e
git init -q -b main /app/repo
cd /app/repo
for m in 'init' 'feat: parser' 'release: 1.2.0' 'chore: bump'; do echo "$m" >> log.txt; git add log.txt; git -c user.name=dev -c user.email=dev@example.com commit -qm "$m"; done
