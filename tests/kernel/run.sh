#!/usr/bin/env bash
# Builds Linux 6.1 with the round-robin and CPU-affinity epoll sets
# (patches/), boots it under qemu with corral's native-mode tests and
# corral-wakebench in an initramfs, and prints what they report.  Exits
# non-zero if a test failed or the guest did not finish.  See README.md.
#
#   tests/kernel/run.sh            tests, then the benchmark (4 and 8 workers)
#   tests/kernel/run.sh --tests    tests only
#   tests/kernel/run.sh --shell    an interactive shell in the guest instead
#
# Environment: CORRAL_KERNEL_CACHE (default ${XDG_CACHE_HOME:-/var/cache}/corral-kernel),
# CORRAL_KERNEL_TIMEOUT (seconds the guest may run, default 3600),
# CORRAL_KERNEL_IMAGE (a bzImage to boot instead of building one),
# CORRAL_KERNEL_SMP (guest CPUs, default 4), CORRAL_WAKEBENCH_ARGS (more
# arguments for every corral-wakebench run in the guest, default -n 2000).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
what=all
case "${1:-}" in
  "") ;;
  --tests) what=tests ;;
  --shell) what=shell ;;
  *) echo "usage: $0 [--tests|--shell]" >&2; exit 2 ;;
esac

# ------------------------------------------------------------- packages
missing=()
while read -r pkg; do
  [[ -z $pkg || $pkg == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done <"$here/packages"
if ((${#missing[@]})); then
  echo "run.sh: installing ${missing[*]}"
  if (($(id -u) == 0)); then sudo=(); else sudo=(sudo); fi
  "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi

# ----------------------------------------------------- the kernel, cached
# Keyed by the patches' code (not their messages) and the config fragment,
# so an edit of either builds afresh; the tree and the build stay outside
# the repository.
cache=${CORRAL_KERNEL_CACHE:-${XDG_CACHE_HOME:-/var/cache}/corral-kernel}
key=$( (for p in "$here"/patches/*.patch; do sed -n '/^diff --git/,$p' "$p"; done
  cat "$here/config.fragment") | sha256sum | cut -c1-16)
work=$cache/$key
src=$work/linux
obj=$work/build
kernel=$obj/arch/x86/boot/bzImage
mkdir -p "$work"
started=$SECONDS
if [[ -n ${CORRAL_KERNEL_IMAGE:-} ]]; then
  kernel=$CORRAL_KERNEL_IMAGE # built elsewhere, from these patches
elif [[ ! -e $work/built ]]; then
  if [[ ! -e $work/patched ]]; then
    rm -rf "$src"
    mkdir -p "$src"
    echo "run.sh: extracting /usr/src/linux-source-6.1.tar.xz into $src"
    tar -xf /usr/src/linux-source-6.1.tar.xz -C "$src" --strip-components=1
    for p in "$here"/patches/*.patch; do
      echo "run.sh: applying ${p##*/}"
      patch -d "$src" -p1 --quiet --forward <"$p"
    done
    touch "$work/patched"
  fi
  mkdir -p "$obj"
  make -C "$src" O="$obj" tinyconfig >/dev/null
  "$src/scripts/kconfig/merge_config.sh" -m -O "$obj" "$obj/.config" "$here/config.fragment" \
    >/dev/null
  make -C "$src" O="$obj" olddefconfig >/dev/null
  # Every line of the fragment must have survived the dependencies.
  while read -r line; do
    [[ $line == CONFIG_* ]] || continue
    grep -qx "$line" "$obj/.config" || { echo "run.sh: $line did not stick" >&2; exit 1; }
  done <"$here/config.fragment"
  echo "run.sh: building the kernel (make -j2 bzImage, nice 10; see $work/build.log)"
  if ! nice -n 10 make -C "$src" O="$obj" -j2 bzImage >"$work/build.log" 2>&1; then
    tail -30 "$work/build.log" >&2
    exit 1
  fi
  touch "$work/built"
  echo "run.sh: kernel built in $((SECONDS - started)) s"
fi

# ------------------------------------------------------------ initramfs
ninja -C "$repo" build/corral build/corral-wakebench build/tests/core/test_native \
  build/tests/core/test_wakeup build/tests/core/test_wakeup_ebpf >/dev/null
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,sbin,proc,sys,dev,tmp,root,corral/tests/core}
cp /bin/busybox "$root/bin/busybox"
binaries=(build/corral build/corral-wakebench build/tests/core/test_native
  build/tests/core/test_wakeup build/tests/core/test_wakeup_ebpf)
for b in "${binaries[@]}"; do
  cp "$repo/$b" "$root/corral/${b#build/}"
done
# Their shared libraries, the loader among them, at the same paths.
for lib in $(for b in "${binaries[@]}"; do ldd "$repo/$b"; done |
  grep -o '/[^ ]*' | sort -u); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
cp "$here/guest-init" "$root/init"
chmod +x "$root/init"
echo "$what" >"$root/corral/what"
printf "%s\n" "${CORRAL_WAKEBENCH_ARGS:--n 2000}" >"$root/corral/wakebench-args"
initrd=$work/initramfs.cpio.gz
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$initrd"

# ----------------------------------------------------------------- boot
smp=${CORRAL_KERNEL_SMP:-4}
qemu=(qemu-system-x86_64 -accel tcg,thread=multi -smp "$smp" -m 1G -nographic -no-reboot
  -kernel "$kernel" -initrd "$initrd"
  -append "console=ttyS0 panic=-1 quiet loglevel=4")
if [[ $what == shell ]]; then
  exec "${qemu[@]}"
fi
log=$work/guest.log
echo "run.sh: booting ($smp CPUs, TCG); the guest's console is copied to $log"
boot_started=$SECONDS
status=0
timeout --foreground "${CORRAL_KERNEL_TIMEOUT:-3600}" "${qemu[@]}" </dev/null | tee "$log" ||
  status=$?
echo "run.sh: the guest ran $((SECONDS - boot_started)) s"
if ((status == 124)); then
  echo "run.sh: FAILED: the guest did not finish within ${CORRAL_KERNEL_TIMEOUT:-3600} s" >&2
  exit 1
fi
if grep -q -E 'WARNING:|BUG:|possible circular locking|inconsistent lock state' "$log"; then
  echo "run.sh: FAILED: the kernel warned (lockdep or a BUG); see $log" >&2
  exit 1
fi
if ! grep -q '^corral-guest: done' "$log"; then
  echo "run.sh: FAILED: the guest stopped before the end; see $log" >&2
  exit 1
fi
if grep -q '^corral-guest: FAILED' "$log"; then
  grep '^corral-guest: FAILED' "$log" >&2
  exit 1
fi
echo "run.sh: all passed"
