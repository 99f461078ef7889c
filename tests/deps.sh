# tests/deps.sh: sourced by tests/run.sh and samples/run.sh. Installs the Debian packages that
# building and testing glmtune need, when any is missing, then configures and builds.
GLM_DEBS="build-essential cmake ninja-build pkg-config zlib1g-dev libpcre2-dev libjansson-dev
libarchive-dev libsentencepiece-dev sentencepiece libopenblas-dev libyaml-dev zstd xz-utils bzip2 zip
libopenmpi-dev openmpi-bin"

# glm_apt_install PKG...: installs the Debian packages not installed yet (as root, or through sudo).
glm_apt_install() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing Debian packages: ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

glm_install_deps() {
    # shellcheck disable=SC2086
    glm_apt_install $GLM_DEBS
}

# glm_cudnn_frontend: the header-only cudnn-frontend (NVIDIA's C++ API of cuDNN's graphs; the CUDA
# build's fused attention uses it, kernels/cuda/attention_cudnn.cpp) from PyPI's wheel into a cache
# (GLM_CACHE, default ~/.cache/glmtune); prints the include directory, or nothing when it cannot
# be had (the build then runs glmtune's own attention kernels only). Needs cudnn.h too.
GLM_CUDNN_FRONTEND_VERSION=1.32.0
glm_cudnn_frontend() {
    local dir="${GLM_CACHE:-$HOME/.cache/glmtune}/cudnn-frontend-$GLM_CUDNN_FRONTEND_VERSION"
    # a failed fetch is not retried for a day (the marker's age), so builds without network do not wait
    if [ ! -f "$dir/include/cudnn_frontend.h" ] && [ -n "$(find "$dir.failed" -mmin -1440 2>/dev/null)" ]; then
        echo "note: cudnn-frontend could not be fetched in the last day ($dir.failed; remove it to retry): CUDA attention without cuDNN" >&2
        return 0
    fi
    if [ ! -f "$dir/include/cudnn_frontend.h" ]; then
        echo "fetching cudnn-frontend $GLM_CUDNN_FRONTEND_VERSION headers from PyPI into $dir" >&2
        # pip downloads the wheel (Debian: python3-pip; nothing is installed into Python)
        python3 -m pip --version >/dev/null 2>&1 || glm_apt_install python3-pip >&2 || true
        python3 -m pip --version >/dev/null 2>&1 || { echo "note: no pip: CUDA attention without cuDNN" >&2; return 0; }
        local tmp
        tmp=$(mktemp -d) || return 0
        if timeout 120 python3 -m pip download -q --timeout 15 --retries 1 --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
               --python-version 3.12 -d "$tmp" "nvidia-cudnn-frontend==$GLM_CUDNN_FRONTEND_VERSION" >/dev/null 2>&1 \
           && python3 - "$tmp" "$dir" <<'PY'
import glob, os, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
whl = glob.glob(os.path.join(tmp, "*.whl"))[0]
part = dest + ".part"
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.startswith("include/"):
            z.extract(n, part)
os.rename(part, dest)
PY
        then :; else
            mkdir -p "$(dirname "$dir")" && touch "$dir.failed"
            echo "note: cudnn-frontend not fetched (no network or pip?): CUDA attention without cuDNN; not retried for a day (remove $dir.failed to retry)" >&2
        fi
        rm -rf "$tmp" "$dir.part"
    fi
    [ -f "$dir/include/cudnn_frontend.h" ] && echo "$dir/include"
    return 0
}

# glm_build BUILD_DIR [CMAKE_ARG...]: configure (CUDA on when nvcc is found; GLMTUNE_CUDA=OFF/ON
# overrides; further arguments go to cmake) and build.
glm_build() {
    local dir="$1"
    shift
    local cuda_flag=("$@")
    if [ -n "${GLMTUNE_CUDA:-}" ]; then cuda_flag=(-DGLMTUNE_CUDA="$GLMTUNE_CUDA"); fi
    if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
    if command -v nvcc >/dev/null && [ "${GLMTUNE_CUDA:-ON}" != OFF ]; then
        local fe
        fe=$(glm_cudnn_frontend)
        [ -n "$fe" ] && cuda_flag+=(-DGLMTUNE_CUDNN_FRONTEND_DIR="$fe")
    fi
    mkdir -p "$dir"
    echo "building in $dir (logs: $dir/configure.log, $dir/build.log)" >&2
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_flag[@]}" >"$dir/configure.log" 2>&1 \
        || { cat "$dir/configure.log" >&2; return 1; }
    cmake --build "$dir" -j "$(nproc)" >"$dir/build.log" 2>&1 || { tail -50 "$dir/build.log" >&2; return 1; }
}
