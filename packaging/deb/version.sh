#!/bin/sh
# Prints the Debian version of the checked-out commit:
#   on a tag vX.Y.Z                 X.Y.Z        (v1.2.0-rc1 gives 1.2.0~rc1)
#   N commits after vX.Y.Z          X.Y.Z+git<YYYYMMDD>.<N>.<sha>
#   no tag at all                   0.0.0~git<YYYYMMDD>.<N>.<sha>, N commits
# The date is the commit's (UTC), so a rebuild of a commit gets its version;
# N keeps two snapshots of one day in order (dpkg compares the sha as text).
set -eu
cd "$(dirname "$0")/../.."
sha=$(git rev-parse --short=7 HEAD)
date=$(TZ=UTC git log -1 --date=format-local:%Y%m%d --format=%cd HEAD)
if desc=$(git describe --tags --long --match 'v[0-9]*' 2>/dev/null); then
	n=${desc%-g*}
	n=${n##*-}
	tag=${desc%-*-g*}
	v=$(printf '%s\n' "${tag#v}" | sed 's/-/~/')
	if [ "$n" != 0 ]; then
		v="$v+git$date.$n.$sha"
	fi
else
	v="0.0.0~git$date.$(git rev-list --count HEAD).$sha"
fi
case $v in
[0-9]*) ;;
*) echo "version.sh: $v does not start with a digit" >&2; exit 1 ;;
esac
if printf '%s\n' "$v" | grep -q '[^A-Za-z0-9.+~]'; then
	echo "version.sh: $v is not a Debian version" >&2
	exit 1
fi
printf '%s\n' "$v"
