#!/usr/bin/env bash
# One device call that runs a named list of steps with per-step time limits, logging each to
# $OUT/<step>.log and a summary line (rc, seconds) to $OUT/summary.txt. Built binaries come from
# .devbin/ (scripts/gpu-test.sh build). Usage on the device (device tool, carry [".devbin.tar.xz"]):
#
#   scripts/device-session.sh tests check sanitize bench profile tune
#
# Steps (an argument "a+b" runs a and b concurrently):
#   t:BIN[:LIMIT_S]  one GPU test binary from .devbin/tests with --ignored (default limit 300 s)
#   memcheck:OPS | racecheck:OPS | synccheck:OPS | initcheck:OPS
#             compute-sanitizer over `duet check --backend gpu --op OPS`
#   presets:A,B,...   duet bench --backend gpu --shape A --shape B ...
#   benchall  duet bench --backend gpu --all with its Chrome trace
#   chk:OPS   duet check --backend gpu --op OPS (limit CHK_LIMIT, default 90 s)
#   e2esuper  duet e2e --preset super (MEMEMEM*E, NVFP4 experts) decode bench on the GPU path
#   e2esuper16  the same with --weights bf16 --gpu-weights compact (bf16 weights stored as bf16,
#             the NVFP4 experts as codes + per-block scale pairs)
#   e2esuper16g the same with --engine-graphs (the engine's step as a CUDA graph)
#   e2esuper16gf the same with --engine-fuse (residual add + next norm in one kernel, ReLU² in the down GEMV)
#   (E2E_STEPS=N: N decode steps in the super benches instead of 8)
#   e2esuper16gp  e2esuper16g with --engine-pdl (programmatic dependent launch between the graph's kernels)
#   e2esuper16gfp e2esuper16gf with --engine-pdl
#   e2esuper16gs / e2esuper16gfs  e2esuper16g / e2esuper16gf with --slot-kernel "${SLOT_KERNEL:-pipe}"
#             (the routed slots' NVFP4 GEMV variants of session 11: pipe, xs, xs3)
#   torch     tools/torch_side_by_side.py: the PyTorch chains at the Super shapes (same run)
#   torch:OP  the same for one op's cases (router, nvfp4, ssu, moe)
#   triton    tools/triton_side_by_side.py: mamba_ssm's Triton SSU and SSD chain at the Super shapes
#             (needs .baselines/ from tools/fetch_baselines.py: carry [".devbin.tar.xz", ".baselines"])
#   e2e       duet e2e on the tiny goldens (tiny-a, held-out tiny-b), paths cpu, gpu, golden
#   e2eengine the same with --decode-engine (the decode steps through the decode engine)
#   ncuslots:V,...  ncu --set full over a slot GEMV variant's first up / down launch (its CSV in
#             $OUT/ncu-slots-V.log; python3 tools/ncu_details.py FILE --rules reads it)
#   ncuengine `duet profile engine-step`: every kernel of one engine step (super, compact
#             weights, graphs) under ncu, durations summed per kernel name
#   profile:OP[:SHAPE[:KREGEX]]  duet profile OP [--shape SHAPE] [--kernel KREGEX]
#   t:BIN[:LIMIT[:FILTER]]  one test binary, optionally only the tests matching FILTER (comma-separated filters)
#   tsan:TOOL:BIN:FILTER  compute-sanitizer TOOL over one test binary's tests matching FILTER
#   tests     every GPU test binary with --ignored (except the benches and rcp_measure)
#   check     duet check --backend gpu
#   sanitize  compute-sanitizer memcheck over `duet check --backend gpu` (every case, every version)
#   racecheck | synccheck | initcheck   the same tool over `duet check --op $SAN_OPS` (default all)
#   ssu       gpu_ssu tests, the SSU bench presets, ncu profile of the batch-256 bf16 preset
#   bench     duet bench --backend gpu --all and the Super-shape presets (JSON into $OUT)
#   profile   duet profile for router, NVFP4, SSU (ncu with --clock-control none)
#   tune      duet tune ssd_chunk_scan --shape super_4k
#   benches   the gpu_bench / mamba_bench test presets (JSON via DUET_OUT)
#   rcp       rcp_measure (all 2^32 inputs)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/duet-out}"
mkdir -p "$OUT"
export DUET_OUT="$OUT"
# A warm machine keeps .devbin/ from an earlier call (ignored outputs stay): unpack the
# carried tarball whenever it is not the one unpacked there (session 10 call 3 ran the
# previous call's binaries).
if [ -f .devbin.tar.xz ]; then
    sum=$(sha1sum .devbin.tar.xz | cut -c1-40)
    if [ "$(cat .devbin/.from 2>/dev/null)" != "$sum" ]; then
        rm -rf .devbin && tar -xJf .devbin.tar.xz && echo "$sum" >.devbin/.from
        echo "devbin: unpacked .devbin.tar.xz $sum" >&2
    fi
fi
B=.devbin
# The kernels precompiled by `scripts/gpu-test.sh build` for sm_90a (a missing or stale entry
# is compiled as usual; one the driver refuses is compiled again): saves a fresh machine's
# ~60-120 s of compiling. (Until session 9 an earlier default of /tmp/duet-kc here kept this
# line from taking effect: no call before session 9 call 4 used the precompiled kernels.)
export DUET_KERNEL_CACHE="${DUET_KERNEL_CACHE:-$PWD/.devbin/kcache}"
T=$B/tests
step() { # name limit_s cmd...
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" >>"$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc ${limit}s-limit took=$((SECONDS - t0))s :: $*" | tee -a "$OUT/summary.txt"
}
san() { # tool limit binary filter...
    local tool=$1 limit=$2 bin=$3
    shift 3
    step "sanitize-$tool-$(basename "$bin")" "$limit" compute-sanitizer --tool "$tool" \
        --error-exitcode 9 --print-limit 20 "$bin" --ignored --test-threads=1 "$@"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$OUT/gpu.txt" 2>&1
one() { # one step (see the list above)
    local s=$1
    case "$s" in
    t:*)  # t:BIN or t:BIN:LIMIT_S or t:BIN:LIMIT_S:FILTER
        local bin=${s#t:} lim=300 filt=()
        if [[ "$bin" == *:* ]]; then lim=${bin#*:}; bin=${bin%%:*}; fi
        if [[ "$lim" == *:* ]]; then IFS=, read -ra filt <<<"${lim#*:}"; lim=${lim%%:*}; fi
        step "tests-$bin" "$lim" "$T/$bin" --ignored --test-threads=1 "${filt[@]}" ;;
    tsan:*)  # tsan:TOOL:BIN:FILTER[,FILTER...]
        local rest=${s#tsan:} tool bin filt fl=()
        tool=${rest%%:*}; rest=${rest#*:}
        bin=${rest%%:*}; filt=${rest#*:}
        IFS=, read -ra fl <<<"$filt"
        san "$tool" "${SAN_LIMIT:-300}" "$T/$bin" "${fl[@]}" ;;
    memcheck:* | racecheck:* | synccheck:* | initcheck:*)
        local tool=${s%%:*} ops=${s#*:}
        local tag
        tag=$(printf '%s' "$ops" | tr -c 'A-Za-z0-9_' '_' | cut -c1-40)
        step "sanitize-$tool-$tag" "${SAN_LIMIT:-300}" compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
            "$B/duet" check --backend gpu --op "$ops" ;;
    presets:*)
        local args=()
        IFS=, read -ra names <<<"${s#presets:}"
        for n in "${names[@]}"; do args+=(--shape "$n"); done
        # One file per step (session 12 call 1's second presets step overwrote the first's).
        local ptag
        ptag=$(printf '%s' "${s#presets:}" | tr -c 'A-Za-z0-9_' '_' | cut -c1-60)
        step "presets-$ptag" "${PRESETS_LIMIT:-300}" "$B/duet" bench --backend gpu "${args[@]}" \
            --out "$OUT/bench_presets_$ptag.json" ;;
    e2e)
        step e2e 200 "$B/duet" e2e fixtures/models/nemotron-tiny-a --compare cpu,gpu,golden \
            --decode 4 --mtp 2
        step e2e-heldout 200 "$B/duet" e2e fixtures/models/nemotron-tiny-b --compare cpu,gpu,golden \
            --decode 4 --mtp 2 ;;
    e2eengine)  # the tiny goldens with the decode steps through the decode engine on the GPU
        step e2e-engine "${E2E_LIMIT:-200}" "$B/duet" e2e fixtures/models/nemotron-tiny-a \
            --compare cpu,gpu,golden --decode 4 --decode-engine
        step e2e-engine-heldout "${E2E_LIMIT:-200}" "$B/duet" e2e fixtures/models/nemotron-tiny-b \
            --compare cpu,gpu,golden --decode 4 --decode-engine ;;
    chk:*)  # chk:OPS_REGEX  duet check --backend gpu --op OPS_REGEX (a quick smoke before timing)
        step "check-$(printf '%s' "${s#chk:}" | tr -c 'A-Za-z0-9_' '_' | cut -c1-40)" "${CHK_LIMIT:-90}" \
            "$B/duet" check --backend gpu --op "${s#chk:}" ;;
    e2esuper) step e2e-super "${E2E_SUPER_LIMIT:-300}" "$B/duet" e2e --preset super --pattern 'MEMEMEM*E' \
        --experts nvfp4 --compare gpu --bench-decode "${E2E_STEPS:-8}" --tokens "${E2E_STEPS:-8}" --mtp-pattern "" --json ;;
    e2esuper16g) step e2e-super-bf16-graphs "${E2E_SUPER_LIMIT:-300}" "$B/duet" e2e --preset super \
        --pattern 'MEMEMEM*E' --experts nvfp4 --weights bf16 --gpu-weights compact --engine-graphs \
        --compare gpu --bench-decode "${E2E_STEPS:-8}" --tokens "${E2E_STEPS:-8}" --mtp-pattern "" --json ;;
    e2esuper16gf) step e2e-super-bf16-graphs-fused "${E2E_SUPER_LIMIT:-300}" "$B/duet" e2e --preset super \
        --pattern 'MEMEMEM*E' --experts nvfp4 --weights bf16 --gpu-weights compact --engine-graphs \
        --engine-fuse --compare gpu --bench-decode "${E2E_STEPS:-8}" --tokens "${E2E_STEPS:-8}" --mtp-pattern "" --json ;;
    e2esuper16gs) step e2e-super-bf16-graphs-slots-"${SLOT_KERNEL:-pipe}" "${E2E_SUPER_LIMIT:-300}" "$B/duet" e2e --preset super \
        --pattern 'MEMEMEM*E' --experts nvfp4 --weights bf16 --gpu-weights compact --engine-graphs \
        --slot-kernel "${SLOT_KERNEL:-pipe}" --compare gpu --bench-decode "${E2E_STEPS:-8}" --tokens "${E2E_STEPS:-8}" --mtp-pattern "" --json ;;
    e2esuper16gfs) step e2e-super-bf16-graphs-fused-slots-"${SLOT_KERNEL:-pipe}" "${E2E_SUPER_LIMIT:-300}" "$B/duet" e2e --preset super \
        --pattern 'MEMEMEM*E' --experts nvfp4 --weights bf16 --gpu-weights compact --engine-graphs \
        --engine-fuse --slot-kernel "${SLOT_KERNEL:-pipe}" --compare gpu --bench-decode "${E2E_STEPS:-8}" --tokens "${E2E_STEPS:-8}" --mtp-pattern "" --json ;;
    e2esuper16gp) step e2e-super-bf16-graphs-pdl "${E2E_SUPER_LIMIT:-300}" "$B/duet" e2e --preset super \
        --pattern 'MEMEMEM*E' --experts nvfp4 --weights bf16 --gpu-weights compact --engine-graphs \
        --engine-pdl --compare gpu --bench-decode "${E2E_STEPS:-8}" --tokens "${E2E_STEPS:-8}" --mtp-pattern "" --json ;;
    e2esuper16gfp) step e2e-super-bf16-graphs-fused-pdl "${E2E_SUPER_LIMIT:-300}" "$B/duet" e2e --preset super \
        --pattern 'MEMEMEM*E' --experts nvfp4 --weights bf16 --gpu-weights compact --engine-graphs \
        --engine-fuse --engine-pdl --compare gpu --bench-decode "${E2E_STEPS:-8}" --tokens "${E2E_STEPS:-8}" --mtp-pattern "" --json ;;
    e2esuper16) step e2e-super-bf16 "${E2E_SUPER_LIMIT:-300}" "$B/duet" e2e --preset super --pattern 'MEMEMEM*E' \
        --experts nvfp4 --weights bf16 --gpu-weights compact --compare gpu --bench-decode "${E2E_STEPS:-8}" --tokens "${E2E_STEPS:-8}" \
        --mtp-pattern "" --json ;;
    torch) step torch 300 python3 tools/torch_side_by_side.py --device cuda \
        --out "$OUT/torch_side_by_side.json" ;;
    torch:*) step "torch-${s#torch:}" 300 python3 tools/torch_side_by_side.py --device cuda \
        --only "${s#torch:}" --out "$OUT/torch_side_by_side_${s#torch:}.json" ;;
    triton) step triton 300 python3 tools/triton_side_by_side.py --out "$OUT/triton_side_by_side.json" ;;
    benchall) step bench-all 300 "$B/duet" bench --backend gpu --all --reps 3 --max-seconds 0.2 \
        --out "$OUT/bench_all_gpu.json" --trace "$OUT/bench_all_gpu.trace.json" ;;
    ncuslots:*)  # ncuslots:V[,V...]  ncu --set full over the first up and down launch of each
        # model_gemv1_slots_nvfp4w_V (moe_slots_t1 bench); summary via tools/ncu_details.py
        local vs=${s#ncuslots:} v ncu
        ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
        IFS=, read -ra vl <<<"$vs"
        for v in "${vl[@]}"; do
            step "ncu-slots-$v" "${NCU_SLOTS_LIMIT:-120}" env DUET_SLOT_VARIANTS="model_gemv1_slots_nvfp4w_$v" \
                "$ncu" --clock-control none -k "regex:^model_gemv1_slots_nvfp4w_$v\$" -c 2 --set full \
                --csv --page details "$B/duet" bench --backend gpu --shape moe_slots_t1 \
                --out /tmp/ncu_slots.json
        done ;;
    ncuengine)  # one decode-engine step (super, compact weights, graphs) under ncu, per kernel
        step profile-engine-step "${NCU_ENGINE_LIMIT:-400}" "$B/duet" profile engine-step ;;
    profile:*)  # profile:OP[:SHAPE[:KERNEL_REGEX]]
        local rest=${s#profile:} op shape kre=()
        op=${rest%%:*}
        shape=""
        [ "$rest" != "$op" ] && shape=${rest#*:}
        if [[ "$shape" == *:* ]]; then kre=(--kernel "${shape#*:}"); shape=${shape%%:*}; fi
        if [ -n "$shape" ]; then
            step "profile-$op-$shape" 200 "$B/duet" profile "$op" --shape "$shape" --launch-count 4 "${kre[@]}"
        else
            step "profile-$op" 200 "$B/duet" profile "$op" --launch-count 6
        fi ;;
    *) legacy "$s" ;;
    esac
}
legacy() {
    local s=$1
    case "$s" in
    tests)
        for t in gpu_router gpu_nvfp4 gpu_cases gpu_ssu mamba_conv1d mamba_ssd; do
            step "tests-$t" 240 "$T/$t" --ignored --test-threads=1
        done
        ;;
    check) step check 240 "$B/duet" check --backend gpu ;;
    sanitize | memcheck) step sanitize-memcheck 240 compute-sanitizer --tool memcheck --error-exitcode 9 \
        --print-limit 20 "$B/duet" check --backend gpu ;;
    racecheck | synccheck | initcheck)
        step "sanitize-$s" 200 compute-sanitizer --tool "$s" --error-exitcode 9 --print-limit 20 \
            "$B/duet" check --backend gpu --op "${SAN_OPS:-.}" ;;
    ssu)
        step tests-gpu_ssu 200 "$T/gpu_ssu" --ignored --test-threads=1
        step bench-ssu 200 "$B/duet" bench --backend gpu --shape ssu_b1_bf16 --shape ssu_b64_bf16 \
            --shape ssu_b256_bf16 --shape ssu_b256_f32 --out "$OUT/bench_ssu.json"
        step profile-ssu 200 "$B/duet" profile selective_state_update --shape ssu_b256_bf16 \
            --kernel 'ssu_v' --launch-count 8
        ;;
    bench)
        step bench-all 200 "$B/duet" bench --backend gpu --all --reps 5 --max-seconds 0.5 --out "$OUT/bench_all_gpu.json"
        step bench-shapes 200 "$B/duet" bench --backend gpu --shape router_t1 --shape router_t4096 \
            --shape router_t32768 --shape nvfp4_8192 --shape conv1d_prefill_50k --shape ssd_50k \
            --shape ssu_b1_bf16 --shape ssu_b64_bf16 --shape ssu_b256_bf16 --shape ssu_b256_f32 --shape copy --out "$OUT/bench_shapes_gpu.json"
        ;;
    profile)
        for op in noaux_tc_router nvfp4_quantize selective_state_update; do
            step "profile-$op" 150 "$B/duet" profile "$op" --launch-count 6
        done
        ;;
    tune) step tune-ssd 200 "$B/duet" tune ssd_chunk_scan --shape super_4k --json ;;
    benches)
        step benches-gpu 200 "$T/gpu_bench" --ignored --nocapture
        step benches-mamba 300 "$T/mamba_bench" --ignored --nocapture
        ;;
    rcp) step rcp 200 "$T/rcp_measure" --ignored --nocapture ;;
    *) echo "unknown step $s" | tee -a "$OUT/summary.txt" ;;
    esac
}
# An argument "a+b+c" runs steps a, b and c concurrently (correctness runs only: never time
# benchmarks next to other GPU work).
for arg in "$@"; do
    if [[ "$arg" == *+* ]]; then
        IFS=+ read -ra group <<<"$arg"
        for s in "${group[@]}"; do one "$s" & done
        wait
    else
        one "$arg"
    fi
done
cat "$OUT/summary.txt"
# The device tool brings back a limited number of files: everything also goes into one tarball.
tar -czf /tmp/duet-all.tgz -C "$OUT" . && mv /tmp/duet-all.tgz "$OUT/all.tgz"
