#!/bin/bash
set -e
cat > /app/wordfreq <<'EOF'
#!/usr/bin/env python3
import collections, re, sys
words = re.findall(r'[a-z]+', open(sys.argv[1]).read().lower())
for w, c in sorted(collections.Counter(words).items(), key=lambda x: (-x[1], x[0]))[:3]:
    print(w, c)
EOF
chmod +x /app/wordfreq
