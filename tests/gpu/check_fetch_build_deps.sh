#!/usr/bin/env bash
# CTest gpu.fetch_build_deps: fetch_build_deps.sh against stand-ins for apt-cache and apt-get
# (no network): it asks for the five -dev packages and the two shared-library packages among
# spdlog's and fmt's dependencies, removes only earlier .deb files from its folder, and stops
# with a message when apt is missing, when the dependencies name no shared library (no package
# lists yet), or when a package did not download.
#
#   check_fetch_build_deps.sh WORK_DIR
set -euo pipefail

script=$(cd "$(dirname "$0")" && pwd)/fetch_build_deps.sh
work=$1
rm -rf "$work"
mkdir -p "$work/stubs" "$work/tools"

fail() { echo "check_fetch_build_deps: $*" >&2; exit 1; }

# apt-cache depends PACKAGE, as Debian prints it (STUB_NO_RUNTIME: without the libraries).
cat >"$work/stubs/apt-cache" <<'EOF'
#!/usr/bin/env bash
[[ $1 == depends ]] || exit 100
echo "$2"
case $2 in
  libspdlog-dev)
    [[ -n ${STUB_NO_RUNTIME:-} ]] || echo "  Depends: libspdlog1.10"
    echo "  Depends: libfmt-dev"
    echo "  Depends: catch2" ;;
  libfmt-dev) [[ -n ${STUB_NO_RUNTIME:-} ]] || echo "  Depends: libfmt9" ;;
esac
EOF
# apt-get download PACKAGE...: an empty .deb per package (STUB_SKIP: one left out), and the
# list of what was asked for.
cat >"$work/stubs/apt-get" <<'EOF'
#!/usr/bin/env bash
[[ $1 == download ]] || exit 100
shift
echo "$*" >"$STUB_LOG"
for package in "$@"; do
  [[ $package == "${STUB_SKIP:-}" ]] || : >"${package}_1.0_amd64.deb"
done
EOF
chmod +x "$work/stubs/apt-cache" "$work/stubs/apt-get"
# The tools the script needs besides apt, for a PATH without apt.
for tool in bash dirname mkdir rm find wc du cut sed; do
  ln -s "$(command -v "$tool")" "$work/tools/$tool"
done
export STUB_LOG=$work/asked
with_apt=$work/stubs:$work/tools

# Fetched: every package asked for once, earlier .deb files gone, other files kept.
dir=$work/deps
mkdir -p "$dir"
: >"$dir/old_0.9_amd64.deb"
echo keep >"$dir/notes.txt"
PATH=$with_apt "$script" "$dir" >"$work/out" 2>&1 || { cat "$work/out"; fail "a good run failed"; }
grep -q '7 packages' "$work/out" || fail "no count of 7 packages: $(cat "$work/out")"
for package in libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libcli11-dev libspdlog1.10 \
               libfmt9; do
  [[ -e $dir/${package}_1.0_amd64.deb ]] || fail "$package not fetched"
  [[ $(grep -o -w -c -- "$package" <<<"$(tr ' ' '\n' <"$STUB_LOG")") == 1 ]] \
    || fail "$package not asked for exactly once: $(cat "$STUB_LOG")"
done
grep -q -w catch2 "$STUB_LOG" && fail "asked for catch2, which the build does not need"
[[ -e $dir/old_0.9_amd64.deb ]] && fail "an earlier .deb was kept"
[[ $(cat "$dir/notes.txt") == keep ]] || fail "a file that is not a .deb was removed"

# expect_failure MESSAGE ENV...: the script fails, naming MESSAGE.
expect_failure() {
  local message=$1
  shift
  if env "$@" "$script" "$work/failing" >"$work/out" 2>&1; then fail "passed: $*"; fi
  grep -q -- "$message" "$work/out" || fail "no '$message' for $*: $(cat "$work/out")"
}
expect_failure "needs apt-get" PATH="$work/tools"
expect_failure "run apt-get update first" PATH="$with_apt" STUB_NO_RUNTIME=1
expect_failure "6 packages in" PATH="$with_apt" STUB_SKIP=libgtest-dev
echo "check_fetch_build_deps: ok"
