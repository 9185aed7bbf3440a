# Source me: makes NVRTC 13.0 loadable for duet's GPU compile test (no GPU needed).
#
#   . scripts/nvrtc-env.sh
#
# Installs the NVRTC wheel into the git-ignored folder .nvrtc/ (once) and prepends its lib
# folder to LD_LIBRARY_PATH. cudarc 0.19 (dynamic-loading, cuda-13000) dlopens, among other
# names, `libnvrtc.so` and `libnvrtc.so.13`; the wheel ships `libnvrtc.so.13` (+ the builtins
# library), so no symlink is needed; LD_LIBRARY_PATH is still required because libnvrtc dlopens
# libnvrtc-builtins.so.13.0 by bare name at compile time.
# Set DUET_SKIP_NVRTC=1 instead to make the compile test skip (it FAILS if NVRTC is missing).

_duet_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
_duet_nvrtc_lib="$_duet_root/.nvrtc/nvidia/cu13/lib"
if [ ! -e "$_duet_nvrtc_lib/libnvrtc.so.13" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --target "$_duet_root/.nvrtc" \
        nvidia-cuda-nvrtc==13.0.88 >&2 || echo "nvrtc-env: pip install of nvidia-cuda-nvrtc==13.0.88 failed" >&2
fi
if [ -e "$_duet_nvrtc_lib/libnvrtc.so.13" ]; then
    case ":${LD_LIBRARY_PATH:-}:" in
        *":$_duet_nvrtc_lib:"*) ;;
        *) export LD_LIBRARY_PATH="$_duet_nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
    esac
else
    echo "nvrtc-env: $_duet_nvrtc_lib/libnvrtc.so.13 not found; the NVRTC compile test will fail (or set DUET_SKIP_NVRTC=1)" >&2
fi
unset _duet_root _duet_nvrtc_lib
