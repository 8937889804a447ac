#!/usr/bin/env bash
# The shipped systemd units agree with what corral needs and with the sample
# configuration:
# - corral.service grants what eBPF steering needs: corral --probe, run as
#   nobody with exactly the unit's ambient capabilities, resolves
#   "wakeup auto" to eBPF wherever root's probe does; and the system call
#   filter, which removes bpf with ~@privileged, allows it again (checked
#   with systemd-analyze where it is installed), and allows io_uring's two
#   calls, which @system-service leaves out.
# - every address corral.socket passes is a listen of the sample
#   configuration, spelled the same way.
# Needs root for the capability part (skipped otherwise).
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*" >&2; exit 1; }
ninja build/corral >/dev/null

unit=docs/corral.service
ambient=$(sed -n 's/^AmbientCapabilities=//p' "$unit")
bounding=$(sed -n 's/^CapabilityBoundingSet=//p' "$unit")
[ -n "$ambient" ] || fail "$unit has no AmbientCapabilities"
[ "$ambient" = "$bounding" ] || fail "AmbientCapabilities ($ambient) is not CapabilityBoundingSet ($bounding)"

if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null &&
   build/corral --probe | grep -q '^  auto .*(ebpf)'; then
  caps=$(for c in $ambient; do c=${c#CAP_}; printf ',+%s' "${c,,}"; done)
  probe=$(setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps="-all$caps" \
            --ambient-caps="-all$caps" --bounding-set="-all$caps" build/corral --probe)
  echo "$probe" | grep -q '^  auto .*(ebpf)' ||
    fail "with the unit's capabilities ($ambient), wakeup auto is not eBPF: $(echo "$probe" | grep '^  auto ')"
else
  echo "capabilities: not root, no setpriv, or no eBPF here: skipped"
fi

# The filter, in order: what ~@privileged removes, a later line may add.
filters=$(sed -n 's/^SystemCallFilter=//p' "$unit")
allowed=no
while read -r line; do
  case "$line" in
    "~"*) for s in ${line#\~}; do
            if [ "$s" = bpf ]; then allowed=no; fi
            if [ "$s" = @privileged ]; then allowed=no; fi
          done ;;
    *) for s in $line; do [ "$s" = bpf ] && allowed=yes; done ;;
  esac
done <<<"$filters"
[ "$allowed" = yes ] || fail "$unit's SystemCallFilter does not allow bpf after ~@privileged"
for s in io_uring_setup io_uring_enter; do
  grep -Eq "^SystemCallFilter=([^~].* )?$s( |\$)" "$unit" ||
    fail "$unit's SystemCallFilter does not allow $s (the batched sends and reads)"
done
if command -v systemd-analyze >/dev/null; then
  systemd-analyze syscall-filter @privileged 2>/dev/null | grep -qw bpf ||
    fail "systemd-analyze: bpf is not in @privileged any more; revisit $unit"
  if systemd-analyze syscall-filter @system-service 2>/dev/null | grep -qw io_uring_setup; then
    echo "systemd-analyze: io_uring is in @system-service now; $unit's own line is redundant"
  fi
fi

# corral.socket and the sample configuration listen on the same addresses.
for address in $(sed -n 's/^ListenStream=//p' docs/corral.socket); do
  grep -Eq "^[[:space:]]*listen[[:space:]]+$address[[:space:];]" docs/examples/corral.conf ||
    fail "corral.socket passes $address, which docs/examples/corral.conf does not listen on"
done
echo "PASS: the systemd units grant eBPF steering and match the sample configuration"
