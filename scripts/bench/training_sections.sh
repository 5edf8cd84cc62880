# Sourced by scripts/bench.sh: the sections that measure training on the CPU (the default set).
# Each section_NAME prints its Markdown; run() and machine() are bench.sh's.
# shellcheck shell=bash

section_throughput() {
  local args=(--stages 2,4 --width 1,0.25 --repeats 3 --micro-batches 30,200
              --simulate)
  if ((smoke)); then
    args=(--stages 2 --repeats 1 --micro-batches 4 --width 0.125
          --micro-batch 16 --simulate)
  fi
  echo "## Throughput: PETRA against reversible backprop (paper, Table 5)"
  echo
  machine
  echo
  run $PY bench/throughput.py --bin-dir "$BIN" "${args[@]}" \
    --json "$RESULTS/throughput.json"
}

section_fleets() {
  echo "## Predicted speed-ups of large fleets (simulator; paper, Table 5)"
  echo
  machine
  echo
  echo "The paper measured PETRA 3.0x faster than reversible backprop for"
  echo "RevNet18 on 10 GPUs and 2.4x for RevNet34 on 18 GPUs (CIFAR-10,"
  echo "micro-batch 256). First from FLOPs, with a V100-class device"
  echo "(15 TFLOP/s sustained) and 10 GB/s links; the \"petra\" row's"
  echo "speed-up is the prediction to set beside the paper's:"
  echo
  local archs=(revnet18 revnet34 revnet50) mb=1000
  if ((smoke)); then archs=(revnet18); mb=64; fi
  for arch in "${archs[@]}"; do
    run "$BIN/petra" simulate --arch "$arch" --variant cifar \
      --stages per-block --micro-batch 256 --schedule all \
      --device-flops-per-second 1.5e13 --link-bandwidth 1e10 \
      --link-latency 2e-5 --micro-batches "$mb"
    echo
  done
  echo "Then from each block's time measured on this machine's CPU (one"
  echo "core per stage), with the same links:"
  echo
  local width=1 batch=256 profile_archs=(revnet18 revnet34)
  if ((smoke)); then width=0.125; batch=8; profile_archs=(revnet18); fi
  for arch in "${profile_archs[@]}"; do
    run taskset -c 0 "$BIN/petra" profile --arch "$arch" --variant cifar \
      --dataset synthetic --width "$width" --stages per-block \
      --micro-batch "$batch" --threads 1 --warmup 1 --repeats 3 \
      --output "$RESULTS/profile-$arch.json"
    echo
    run "$BIN/petra" simulate --profile "$RESULTS/profile-$arch.json" \
      --schedule all --link-bandwidth 1e10 --link-latency 2e-5 \
      --micro-batches "$mb"
    echo
  done
}

section_hosts() {
  echo "## Sixty-four devices on eight hosts (simulator)"
  echo
  machine
  echo
  echo "A RevViT-B-sized transformer made 62 blocks deep (embed 768, 12 heads,"
  echo "MLP 3072, patch 16, 224x224: 64 per-block stages) on 8 hosts of 8"
  echo "devices, NVLink-class links inside a host (450 GB/s) and 50 GB/s"
  echo "across. First from FLOPs at 400 TFLOP/s sustained (an H100-class"
  echo "device in bf16), micro-batch 64:"
  echo
  local model=(--arch revvit --variant imagenet --embed-dim 768 --depth 62
               --heads 12 --mlp-ratio 4 --patch-size 16)
  local links=(--devices-per-host 8 --link-bandwidth 4.5e11
               --cross-host-bandwidth 5e10 --link-latency 5e-6)
  local mb=64 profile_mb=8 micro_batches=1000
  if ((smoke)); then
    model=(--arch revvit --variant mnist --embed-dim 32 --depth 14 --heads 2
           --mlp-ratio 2 --patch-size 7)
    links=(--devices-per-host 4 --link-bandwidth 4.5e11
           --cross-host-bandwidth 5e10 --link-latency 5e-6)
    mb=8; profile_mb=4; micro_batches=64
  fi
  run "$BIN/petra" simulate "${model[@]}" --stages per-block \
    --micro-batch "$mb" --device-flops-per-second 4e14 "${links[@]}" \
    --schedule all --micro-batches "$micro_batches"
  echo
  echo "Then from each block's times measured on this machine's CPU (no GPU"
  echo "profile yet: a CPU's blocks take about a thousand times a GPU's, so"
  echo "the links never bound this run; the schedules' order and the memory"
  echo "columns are what carry over), micro-batch $profile_mb:"
  echo
  run "$BIN/petra" profile "${model[@]}" --dataset synthetic \
    --stages per-block --micro-batch "$profile_mb" --threads "$(nproc)" \
    --warmup 1 --repeats 2 --output "$RESULTS/profile-hosts.json"
  echo
  run "$BIN/petra" simulate --profile "$RESULTS/profile-hosts.json" \
    "${links[@]}" --schedule all --micro-batches "$micro_batches"
}

section_capped() {
  echo "## The memory argument: one job under a per-device memory cap"
  echo
  machine
  echo
  local args=(--stages 10 --cap-mib 1300 --cap-mib 1700 --cap-mib 2400 --job
              "--arch revnet18 --width 1 --dataset synthetic --variant cifar --micro-batch 128 --train-limit 5120 --test-limit 128 --epochs 1 --seed 1")
  if ((smoke)); then
    args=(--stages 2 --cap-mib 2000 --job
          "--arch revnet18 --width 0.125 --dataset synthetic --variant cifar --micro-batch 16 --train-limit 256 --test-limit 32 --epochs 1 --seed 1")
  fi
  run $PY bench/capped_memory.py --bin-dir "$BIN" "${args[@]}" \
    --json "$RESULTS/capped.json"
  echo
  echo "A device is a process here, and its cap RLIMIT_DATA: the same"
  echo "allocations fail on a GPU at the caching allocator's fraction"
  echo "(model::LimitDeviceMemory). 1F1B-style stashing is the engine's"
  echo "delayed mode keeping every stage's inputs and the weights each forward"
  echo "used (PipeDream's buffers); backprop is plain autograd over the whole"
  echo "network in one process (petra_bench_backprop). Each stage server gets"
  echo "one core's share (2 cores here), so the fleet's samples/s is not"
  echo "faster than one process on this machine: the table says what fits."
  echo "RevNet18's three downsampling blocks are not reversible: under PETRA"
  echo "they keep their inputs too (stage 3 of 10: 13 micro-batches in"
  echo "flight), and that stage sets PETRA's need: at this size about what"
  echo "plain backprop needs on one device, while stashing needs more. Near a"
  echo "cap, whether a run fits can change between runs (threads' stacks,"
  echo "receive buffers and allocator arenas count against RLIMIT_DATA too)."
}

section_zoo() {
  echo "## The zoo at ImageNet size: parameter counts and a first epoch"
  echo
  machine
  echo
  local samples=16
  if ((smoke)); then samples=0; fi
  run $PY bench/zoo.py --bin-dir "$BIN" --train-samples "$samples"
}

section_memory() {
  echo "## Memory of the buffer configurations (paper, Table 3)"
  echo
  machine
  echo
  # arch:width. RevNet50 and i-RevNet18 at half width keep the section
  # within minutes on 2 cores (the four configurations train each network).
  local batch=64 runs=(revnet18:1 revnet50:0.5 irevnet18:0.5)
  if ((smoke)); then batch=4; runs=(revnet18:0.125 irevnet18:0.125); fi
  for r in "${runs[@]}"; do
    run "$BIN/petra_bench_memory" --arch "${r%%:*}" --variant cifar \
      --width "${r##*:}" --micro-batch "$batch"
    echo
  done
  echo "Peak bytes count parameters (with BatchNorm statistics), optimizer"
  echo "state (momentum and accumulated gradients), input buffers and weight"
  echo "stashes; \"without stage 0's data buffer\" leaves out the first stage's"
  echo "buffered data batch, as the paper's Table 3 does. CIFAR-size inputs"
  echo "(32x32), not ImageNet's 224x224, so that the four configurations train"
  echo "in minutes on this machine."
}

section_accuracy() {
  local args=(--e2e 100)
  # Every configuration, on the per-block stages only: the other stage
  # count is the same command with another --stages.
  if ((smoke)); then args=(--smoke --e2e 10 --stages per-block); fi
  echo "## Accuracy: PETRA against backprop and delayed gradients (paper, Tables 2 and 4, Figures 4 and 5)"
  echo
  machine
  echo
  run $PY bench/accuracy.py --petra "$BIN/petra" "${args[@]}" \
    --json "$RESULTS/accuracy.json"
}

section_long_run() {
  # Is the per-block gap of the 3-epoch runs the short schedule? 15 epochs
  # with the paper's recipe (warm-up, step decay) fitted to that length.
  local args=(--epochs 15 --stages per-block --only "backprop,PETRA k=1,PETRA k=4"
    --model-flags "--recipe paper" --e2e 200)
  if ((smoke)); then
    args=(--smoke --stages per-block --only "backprop,PETRA k=1"
      --model-flags "--recipe paper" --e2e 10)
  fi
  echo "## Accuracy: the per-block gap over a longer run (the paper's recipe)"
  echo
  machine
  echo
  run $PY bench/accuracy.py --petra "$BIN/petra" "${args[@]}" \
    --json "$RESULTS/long_run.json"
}

section_forward_gradient() {
  # One epoch: per block, forward gradients push up to 9 tangents a stage
  # (RevNet18 has 10 stages), about 20 times PETRA's work.
  local args=(--epochs 1)
  if ((smoke)); then args=(--smoke); fi
  echo "## Accuracy: forward gradients against PETRA and backprop"
  echo
  machine
  echo
  run $PY bench/accuracy.py --petra "$BIN/petra" "${args[@]}" \
    --only "backprop,PETRA k=1,forward gradient (local guess),forward gradient (random guess),local losses only" \
    --json "$RESULTS/forward_gradient.json"
}

section_transformer_recipe() {
  # Issue 36: the main job a transformer user runs first (every flag but
  # the architecture, the dataset and the epochs left out, so the recipe is
  # the default transformer one), then RevViT and RevNet18 with AdamW under
  # PETRA against backprop over 15 epochs, with each stage's cosine to the
  # end-to-end gradient. The 15-epoch runs use a sixth of Fashion-MNIST's
  # training set and RevViT patches of 7 (16 tokens), to fit an hour on 2
  # cores.
  local main=(--arch revvit --dataset fashion_mnist --epochs 1)
  local long=(--epochs 15 --train-limit 10000 --stages per-block,2
              --only "backprop,PETRA k=1" --e2e 100)
  local revnets=1
  if ((smoke)); then
    # CI's time: the accuracy section already runs accuracy.py's modes.
    main+=(--train-limit 512 --test-limit 128 --embed-dim 16 --depth 2)
    long=(--smoke --stages per-block --only "PETRA k=1" --e2e 10)
    revnets=0
  fi
  echo "## AdamW and the transformer recipe (RevViT, RevNet18)"
  echo
  machine
  echo
  echo "### The first run of a transformer user"
  echo
  RUN_FILTER="^(petra train:|epoch 1/1:|test accuracy)" run "$BIN/petra" \
    train "${main[@]}"
  echo
  echo "### RevViT under PETRA against backprop, transformer recipe"
  echo
  run $PY bench/accuracy.py --petra "$BIN/petra" --arch revvit \
    --model-flags "--patch-size 7" "${long[@]}" \
    --json "$RESULTS/transformer_recipe_revvit.json"
  echo
  if ((revnets)); then
    echo "### RevNet18 with AdamW, and with SGD (the default recipe)"
    echo
    run $PY bench/accuracy.py --petra "$BIN/petra" \
      --model-flags "--optimizer adamw" "${long[@]}" \
      --json "$RESULTS/transformer_recipe_revnet_adamw.json"
    echo
    run $PY bench/accuracy.py --petra "$BIN/petra" "${long[@]}" \
      --json "$RESULTS/transformer_recipe_revnet_sgd.json"
  fi
}

section_transformer() {
  # The size trains in under 15 minutes a run on 2 cores (RevViT, 16 tokens
  # of 64, 6 blocks; 15 epochs); the sweep's 5 runs took 43 minutes, the
  # micro-batch-8 pair about 14.
  local size="--patch-size 7" epochs=15 batch=64 split=1,7
  if ((smoke)); then
    size="--patch-size 7 --embed-dim 16 --depth 3 --heads 2" epochs=1
    batch=4 split=1,4
  fi
  echo "## Reversible vision transformers (RevViT) under PETRA"
  echo
  machine
  echo
  echo "### Accuracy: PETRA against backprop"
  echo
  # SGD at the shared rate, as these tables were measured before AdamW and
  # delay-scaled rates became revvit's defaults (the transformer_recipe
  # section measures those).
  local acc=(--arch revvit --model-flags "$size --optimizer sgd --delay-lr-power 0" --base-lr 0.1
             --epochs "$epochs" --only "backprop,PETRA k=1,PETRA k=4")
  if ((smoke)); then acc+=(--smoke); fi
  run $PY bench/accuracy.py --petra "$BIN/petra" "${acc[@]}" \
    --json "$RESULTS/transformer_accuracy.json"
  echo
  echo "### Per block and on 2 stages at micro-batch 8, k = 32"
  echo
  # The same batch (256) and lr (0.4) as k = 4 above, an eighth of the
  # delay in optimizer steps: what closes the per-block gap.
  local small=(--arch revvit --model-flags "$size --optimizer sgd --delay-lr-power 0 --micro-batch 8"
               --base-lr 0.0125 --epochs "$epochs" --only "PETRA k=32")
  if ((smoke)); then small+=(--smoke); fi
  run $PY bench/accuracy.py --petra "$BIN/petra" "${small[@]}" \
    --json "$RESULTS/transformer_small_micro_batch.json"
  echo
  echo "### PaReprop: one stage's backward with the rebuild overlapped"
  echo
  local pp=(--job-flags "--arch revvit $size --split-at $split" --blas-threads 0)
  if ((smoke)); then pp+=(--smoke); fi
  # shellcheck disable=SC2086
  run $PY bench/pareprop.py --petra "$BIN/petra" "${pp[@]}"
  echo
  echo "### Memory of the buffer configurations (paper, Table 3)"
  echo
  # shellcheck disable=SC2086
  run "$BIN/petra_bench_memory" --arch revvit --variant mnist $size \
    --micro-batch "$batch"
}

section_transport() {
  local sizes=(16 64 256) repeats=20
  if ((smoke)); then sizes=(1); repeats=2; fi
  echo "## Transport: a tensor between two stages on loopback, per data channel"
  echo
  machine
  local mb
  for mb in "${sizes[@]}"; do
    echo
    run "$BIN/petra_bench_transport" --device cpu --megabytes "$mb" \
      --repeats "$repeats" --transports grpc,grpc_bulk,shm
  done
  # What the bulk channel's connections add (4 above, the default).
  local mb_conn=64 conns
  if ((smoke)); then mb_conn=1; fi
  for conns in 1 2; do
    echo
    run "$BIN/petra_bench_transport" --device cpu --megabytes "$mb_conn" \
      --repeats "$repeats" --transports grpc_bulk --connections "$conns"
  done
}

section_replicas() {
  local args=()
  if ((smoke)); then
    args=(--job-flags "--epochs 1 --train-limit 256 --test-limit 64 --width 0.125")
  fi
  echo "## Replicas: R copies of a J-stage pipeline on this machine"
  echo
  machine
  echo
  run $PY bench/replicas.py --petra "$BIN/petra" "${args[@]}"
}

section_replicas_accuracy() {
  # The main job (3 epochs) on a fleet, with 2 replicas and without, at the
  # same global batch.
  local args=(--job-flags "")
  if ((smoke)); then
    args=(--job-flags "--epochs 1 --train-limit 512 --test-limit 64 --width 0.125")
  fi
  echo "## Replicas: the main job's accuracy on the fleet, R = 2 against R = 1"
  echo
  machine
  echo
  run $PY bench/replicas.py --petra "$BIN/petra" --runner fleet \
    --shapes 1x2,2x2 --same-global-batch "${args[@]}"
}

section_replicas_plan() {
  local args=()
  if ((smoke)); then
    args=(--networks revnet50 --devices 8 --devices-per-host 4
          --stage-counts 2 --micro-batches-per-replica 8)
  fi
  echo "## Replicas: which R x J for 64 devices (simulated)"
  echo
  machine
  echo
  run $PY bench/replicas_plan.py --petra "$BIN/petra" "${args[@]}"
}

section_staleness() {
  local args=()
  if ((smoke)); then
    args=(--smoke --job-flags "$SMOKE_REVVIT --lr 0.1")
  fi
  echo "## Deep pipelines: which approximation destabilises (paper, Table 4)"
  echo
  machine
  echo
  run $PY bench/staleness.py --petra "$BIN/petra" "${args[@]}"
}

section_threads() {
  local args=()
  if ((smoke)); then
    args=(--smoke --job-flags "$SMOKE_REVVIT")
  fi
  echo "## Threads: torch's and OpenBLAS's on the same cores"
  echo
  machine
  echo
  run $PY bench/threads.py --petra "$BIN/petra" "${args[@]}"
}

section_feed() {
  # The feed against what it feeds: a 2-stage fleet at width 1 on these
  # cores (imagenet variant, synthetic data so the feed is not involved).
  local feed=(--images 1024 --side 224 --workers 1,2)
  local fleet=(--variant imagenet --width 1 --micro-batch 16 --max-steps 8
    --train-limit 256 --test-limit 32)
  if ((smoke)); then
    # The synthetic set at 224x224 alone takes half a minute to make.
    feed=(--images 192 --workers 1,2)
    fleet=(--variant cifar --width 0.125 --micro-batch 8 --max-steps 2
      --train-limit 32 --test-limit 8)
  fi
  echo "## The image-folder feed"
  echo
  machine
  echo
  echo "What the coordinator does to an image folder before sending a"
  echo "micro-batch (read, decode, random resized crop to 224x224, flip,"
  echo "normalise), timed over generated JPEGs, with its decode workers:"
  echo
  run "$BIN/petra_bench_feed" "${feed[@]}"
  echo
  echo "What it feeds: RevNet18, imagenet variant, 2 stages on the same"
  echo "cores, training samples/s (its data synthetic, held in memory):"
  echo
  run "$BIN/petra" train --quiet --arch revnet18 \
    --dataset synthetic --stages 2 "${fleet[@]}" \
    --report "$RESULTS/feed_fleet.json" --output "$RESULTS/feed_fleet.pt"
  $PY -c 'import json, sys
r = json.load(open(sys.argv[1]))
print("fleet: %.1f samples/s (%d optimizer steps)"
      % (r["samples_per_second"], r["optimizer_steps"]))' \
    "$RESULTS/feed_fleet.json"
}

section_peer() {
  local args=(--epochs 3) ours=(--micro-batches 937)
  if ((smoke)); then
    args=(--epochs 1 --train-limit 640 --test-limit 256 --width 0.125)
    ours=(--micro-batches 4 --width 0.125)
  fi
  echo "## A peer: the same RevNet18 in plain PyTorch (Python)"
  echo
  machine
  echo
  echo "The same network, data, recipe and seed as the accuracy section's"
  echo "backprop row (\`petra train --mode backprop --stages 1\`, which it"
  echo "matches loss for loss on one thread), trained by plain PyTorch on all"
  echo "cores:"
  echo
  run $PY bench/peer_pytorch.py "${args[@]}" --quiet \
    --json "$RESULTS/peer.json"
  echo
  echo "Beside it, our plain backprop in C++ (libtorch, the same network and"
  echo "cores, graph kept, one SGD step per micro-batch; one epoch):"
  echo
  run "$BIN/petra_bench_backprop" --threads "$(nproc)" --arch revnet18 \
    --width 0.25 --dataset fashion_mnist --seed 1 "${ours[@]}"
}

section_partition() {
  local args=()
  if ((smoke)); then args=(--smoke --repeats 1 --stages 2); fi
  echo "## Partition: the default split of --stages N against a measured one"
  echo
  machine
  echo
  echo "Each block's forward + backward measured on one core, and three"
  echo "splits scored by their slowest stage under those times (what bounds"
  echo "a pipeline's throughput): the default (FLOPs plus 250 per element"
  echo "written by a memory-bound layer, services/model/network_summary.cc),"
  echo "FLOPs alone (the default before), and the best for the measured"
  echo "times. \"vs best\" is the slowest stage over the best split's."
  echo
  run $PY bench/partition.py --petra "$BIN/petra" "${args[@]}"
}

section_concurrent() {
  # The issue's figure is for four cores' worth of servers: one core each
  # where the machine has four (the GPU host's call runs it too); on fewer,
  # each server held to a fifth of the machine's cores by a cgroup quota
  # where this machine allows one (root), so that no server takes another's
  # share, alone or together.
  local args=()
  if ((smoke)); then
    args=(--smoke)
  elif (($(nproc) >= 4)); then
    args=(--cores 4)
  elif $PY bench/cpu_quota.py; then
    args=(--cpu-quota "$($PY -c "print($(nproc) / 5)")")
  fi
  echo "## Two jobs at once against each alone (issue 51)"
  echo
  machine
  echo
  echo "One coordinator, four stage servers: each job alone, then both at"
  echo "once on disjoint servers. Each job's wall time is its record's start"
  echo "to end; the ratio is what the other job cost it."
  echo
  run $PY bench/concurrent_jobs.py --bin-dir "$BIN" "${args[@]}"
}

section_probe() {
  local args=(--runs 10)
  if ((smoke)); then args=(--runs 2); fi
  echo "## Health probe cost (docs/DEPLOY.md, Probes)"
  echo
  machine
  echo
  echo "The container and Kubernetes probes run every 5-10 s in every pod:"
  echo "the client's \`petra health\` against the \`petra-health\` binary the"
  echo "manifests run. (Until 2026-11-29 the client loaded libtorch: 0.48 s"
  echo "and 170 MB a probe; petra-local now runs the commands that need it.)"
  echo
  run $PY bench/probe_cost.py --bin-dir "$BIN" "${args[@]}"
}

section_language_model() {
  # Issue 50: RevLM under PETRA against backprop (bits per byte after the
  # same tokens), and memory per stage against gpt's 1F1B with stashing.
  local args=()
  if ((smoke)); then args=(--smoke); fi
  echo "## Language models: RevLM under PETRA against backprop, and gpt's 1F1B memory"
  echo
  machine
  echo
  run $PY bench/language_model.py --petra "$BIN/petra" "${args[@]}" \
    --json "$RESULTS/language_model.json"
}

section_micro_batch_cost() {
  # Issue 67: the fixed cost of a micro-batch, in process and on the fleet,
  # from the same optimizer steps fed as micro-batches of 1 to 32. The
  # smoke: one network (24 runs took a minute of CI's 30).
  local args=()
  if ((smoke)); then args=(--smoke --networks revnet18); fi
  echo "## The fixed cost of a micro-batch: micro-batches of 1 to 32 at the same steps"
  echo
  machine
  echo
  run $PY bench/micro_batch_cost.py --petra "$BIN/petra" "${args[@]}" \
    --json "$RESULTS/micro_batch_cost.json"
}

section_fidelity_at_speed() {
  # Issue 67: each delay correction at the default micro-batch and smaller
  # ones (same samples a step), against backprop; final rows over 3 seeds.
  local args=()
  if ((smoke)); then args=(--smoke); fi
  echo "## Fast and faithful: delay corrections and smaller micro-batches against backprop"
  echo
  machine
  echo
  run $PY bench/fidelity_at_speed.py --petra "$BIN/petra" "${args[@]}" \
    --json "$RESULTS/fidelity_at_speed.json"
}

section_race() {
  # Issue 68: PETRA against backprop, GPipe, 1F1B and 1F1B with recompute,
  # at J = 2 and 4, each beside the simulator's prediction.
  # Its curves go beside the doc (docs/images), a smoke run's to scratch;
  # the simulator at scale (a minute a row: the estimate builds the
  # 64-block model) only in the full run.
  local args=(--at-scale --plots "$(dirname "$DOC")/images")
  if ((smoke)); then args=(--smoke --networks revnet18 --plots "$RESULTS"); fi
  mkdir -p "${args[-1]}"
  echo "## The race: PETRA against GPipe, 1F1B and backprop"
  echo
  machine
  echo
  run $PY bench/race.py --petra "$BIN/petra" "${args[@]}" \
    --json "$RESULTS/race.json"
}

section_exact_schedules() {
  # Issue 68's done-when: the main job under backprop, GPipe and 1F1B, the
  # same gradients in the same micro-batches, to the same accuracy.
  local args=()
  if ((smoke)); then args=(--smoke); fi
  echo "## The main job under the exact schedules: backprop, GPipe, 1F1B"
  echo
  machine
  echo
  run $PY bench/exact_schedules.py --petra "$BIN/petra" "${args[@]}"
}
