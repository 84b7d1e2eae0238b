#!/bin/bash
# The issue-20 defects, before and after: tools/before_after.sh <a virtualenv's bin folder>.
# One line per case: the Stop hook on a closed stdin and on deeply nested JSON, the PRD and the
# prompt template naming a device or a FIFO, and the secrets of an agent argv in the state
# folder (fake values of the well-known shapes). Needs GNU time (/usr/bin/time).
B=$1
W=$(mktemp -d); cd $W
export HOME=$W/home; mkdir -p $HOME
# 1. hook: closed stdin
$B/python -m pytest_ralph.hook <&- >out1 2>err1; echo "hook, stdin closed: exit $? ; stderr: $(head -c 120 err1 | tr '\n' ' ')"
# 2. hook: 2 KB nested brackets
python3 -c "print('['*1000 + ']'*1000)" > nested.json
$B/python -m pytest_ralph.hook < nested.json >out2 2>err2; echo "hook, 2 KB of nested brackets: exit $? ; stderr: $(tail -c 120 err2 | tr '\n' ' ')"
# 3. --ralph-prd naming /dev/zero through zero.json (dry run): memory and time, bounded
mkdir p && cd p && echo "[pytest]" > pytest.ini
ln -s /dev/zero zero.json
/usr/bin/time -f "%M KB %e s" timeout 10 $B/pytest --ralph-dry-run --ralph-agent true --ralph-prd zero.json -p no:cacheprovider >o3 2>e3; c=$?; echo "--ralph-prd zero.json (/dev/zero) --ralph-dry-run: exit $c ; $(tail -1 e3) ; $(grep -h -m1 'device' o3 e3 | head -1 | cut -c1-150)"
mkfifo fifo.json
/usr/bin/time -f "%M KB %e s" timeout 10 $B/pytest --ralph-dry-run --ralph-agent true --ralph-prd fifo.json -p no:cacheprovider >o4 2>e4; c=$?; echo "--ralph-prd FIFO --ralph-dry-run: exit $c ($([ $c = 124 ] && echo 'timed out after 10 s')) ; $(tail -1 e4) ; $(grep -h -m1 'fifo' o4 e4 | head -1 | cut -c1-150)"
cat > prd.json <<'J'
{"userStories":[{"id":"US-1","title":"t","description":"d","acceptanceCriteria":[{"text":"x","exists":"x.txt"}],"priority":1,"passes":false,"notes":""}]}
J
/usr/bin/time -f "%M KB %e s" timeout 10 $B/pytest --ralph-dry-run --ralph-agent true -o ralph_prompt=/dev/zero -p no:cacheprovider >o5 2>e5; c=$?; echo "-o ralph_prompt=/dev/zero --ralph-dry-run: exit $c ; $(tail -1 e5) ; $(grep -h -m1 'zero' o5 e5 | head -1 | cut -c1-150)"
timeout 10 $B/pytest fifo.json -p no:cacheprovider >o6 2>e6; c=$?; echo "gate pytest fifo.json: exit $c ; $(grep -h -m1 -i 'fifo\|not found' o6 e6 | head -1 | cut -c1-160)"
# secrets
cd $W && mkdir s && cd s && echo "[pytest]" > pytest.ini && cp ../p/prd.json .
cat > agent.py <<'A'
import sys; print("agent argv:", sys.argv[1:]); open("x.txt","w").write("x")
A
export GITHUB_TOKEN=ghp_AAAABBBBCCCCDDDDEEEEFFFFGGGGHHHH1234 GH_PAT=github_pat_11AAAAAAA0aaaaaaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb DATABASE_URL=postgres://app:s3cr3tpassw0rd@db.example:5432/app
timeout 120 $B/pytest --ralph -p no:cacheprovider --ralph-agent "python agent.py --token $GITHUB_TOKEN --pat $GH_PAT --db $DATABASE_URL" >o7 2>e7; c=$?
n1=$(grep -rl -a "ghp_AAAABBBB" .pytest_ralph 2>/dev/null | wc -l); n2=$(grep -rl -a "github_pat_11AAAA" .pytest_ralph 2>/dev/null | wc -l); n3=$(grep -rl -a "s3cr3tpassw0rd" .pytest_ralph 2>/dev/null | wc -l)
echo "secrets run: exit $c ; files in .pytest_ralph holding GITHUB_TOKEN: $n1, GH_PAT: $n2, DATABASE_URL password: $n3 ($(grep -rl -a 'ghp_AAAABBBB\|github_pat_11AAAA\|s3cr3tpassw0rd' .pytest_ralph 2>/dev/null | sed 's|.*/\.pytest_ralph/||' | sed 's|runs/[^/]*/|runs/<id>/|' | sort -u | tr '\n' ' '))"
rm -rf $W
