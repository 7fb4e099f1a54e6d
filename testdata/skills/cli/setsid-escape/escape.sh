#!/bin/sh
# escape.sh MODE PIDFILE: see SKILL.md.
set -eu
mode=$1
pidfile=$2
# The inner shell records its own pid, which exec keeps for sleep; the rename
# makes the file appear complete.
setsid sh -c 'echo $$ > "$1.tmp" && mv "$1.tmp" "$1" && exec sleep 30' escape "$pidfile" &
while [ ! -s "$pidfile" ]; do
	sleep 0.01
done
echo '{"escaped": true}'
if [ "$mode" = hang ]; then
	exec sleep 30
fi
