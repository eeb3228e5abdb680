#!/bin/sh
# Builds the docker test image TAG from the host's static busybox, once per engine
# (nothing can be pulled on the test machines). Used by tests/support/mod.rs (the
# command's Rust tests) and python/tests/conftest.py (the Python package's tests).
set -e
tag="$1"
# Imported once per engine: a re-import would leave the old one dangling.
docker image inspect "$tag" >/dev/null 2>&1 && exit 0
bb=$(command -v busybox)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
mkdir -p "$d/bin" "$d/tmp" "$d/etc"
chmod 1777 "$d/tmp"
cp "$bb" "$d/bin/busybox"
for a in $("$bb" --list); do
  [ "$a" = busybox ] || ln -s busybox "$d/bin/$a"
done
echo 'nobody:x:65534:65534:nobody:/:/bin/sh' > "$d/etc/passwd"
tar -C "$d" -c . | docker import -c 'ENV PATH=/bin' - "$tag" >/dev/null
