#!/usr/bin/env bash
# Commit subjects say what changed in at most 72 characters; the body says why.
# Checks every commit after the last one made before this rule (older history is left as
# it is), or the commits given as a range (`scripts/check-commits.sh BASE..HEAD`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

RULE_SINCE=ef6b48dadcaf83764c2976f40ce70b25bee132f9 # the last commit before subjects were held to 72 characters
RULE_SINCE_TIME=1795778037                         # its commit time (for a shallow clone)
MAX=72

git rev-parse --git-dir >/dev/null 2>&1 || {
    echo "check-commits: not a git checkout; nothing to check"
    exit 0
}
if (($#)); then
    range="$1"
elif git cat-file -e "${RULE_SINCE}^{commit}" 2>/dev/null; then
    range="${RULE_SINCE}..HEAD"
else
    # A shallow clone without that commit: the commits it has that are newer than it.
    range="HEAD"
    since=(--since="@$((RULE_SINCE_TIME + 1))")
fi

since=()
bad=0
while IFS=$'\t' read -r hash subject; do
    if ((${#subject} > MAX)); then
        printf 'check-commits: %s subject is %d characters (max %d): %s\n' \
            "$hash" "${#subject}" "$MAX" "$subject" >&2
        bad=$((bad + 1))
    fi
done < <(git log --no-merges "${since[@]}" --format='%h%x09%s' "$range")

if ((bad)); then
    echo "check-commits: $bad commit subject(s) over $MAX characters; put details in the body" >&2
    exit 1
fi
echo "check-commits: every subject in $range is at most $MAX characters"
