# tests/deps.sh: sourced by tests/run.sh and samples/run.sh. Installs the Debian packages that
# building and testing glmtune need, when any is missing, then configures and builds.
GLM_DEBS="build-essential cmake ninja-build pkg-config zlib1g-dev libpcre2-dev libjansson-dev
libarchive-dev libsentencepiece-dev sentencepiece libopenblas-dev libyaml-dev zstd xz-utils bzip2 zip
libopenmpi-dev openmpi-bin"

glm_install_deps() {
    local missing=()
    for p in $GLM_DEBS; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing Debian packages: ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# glm_build BUILD_DIR: configure (CUDA on when nvcc is found; GLMTUNE_CUDA=OFF/ON overrides) and build.
glm_build() {
    local dir="$1"
    local cuda_flag=()
    if [ -n "${GLMTUNE_CUDA:-}" ]; then cuda_flag=(-DGLMTUNE_CUDA="$GLMTUNE_CUDA"); fi
    if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
    mkdir -p "$dir"
    echo "building in $dir (logs: $dir/configure.log, $dir/build.log)" >&2
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_flag[@]}" >"$dir/configure.log" 2>&1 \
        || { cat "$dir/configure.log" >&2; return 1; }
    cmake --build "$dir" -j "$(nproc)" >"$dir/build.log" 2>&1 || { tail -50 "$dir/build.log" >&2; return 1; }
}
