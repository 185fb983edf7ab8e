//! `amprun`, the Amp runtime's command line: a thin shell (files, flags, terminal) over
//! the compiler (`amp-sema`, `amp-lower`: an `.amp` model is compiled in-process, exactly
//! as `ampc compile` does), the partition planner (`amp-plan`), the graph loader and
//! verifier (`amp-ir`: `.ampg` files), the data loaders (`amp-data`), parameters and
//! checkpoints (`amp-params`) and the asynchronous model-parallel executor (`amp-exec`).
//! It decides nothing those crates decide; it reads, reports and writes.
//!
//! ```text
//! amprun train MODEL.{amp,ampg} --data train.jsonl [--valid v.jsonl] [--epochs N]
//!        [--workers N] [--copies K] [--max-active-keys K] [--min-update-frequency M] [--deterministic]
//!        [--update-frequency NODE=M ...] [--async] [--optimizer sgd|momentum|adam]
//!        [--lr X] [--momentum X] [--weight-decay X] [--clip-norm X] [--seed S]
//!        [--save ckpt.safetensors] [--resume] [--init p.safetensors] [--metrics m.jsonl]
//!        [--tensorboard DIR] [--report run.html] [--trace t.json] [--skip-bad-data] [--limit N] [-D k=v] [--model NAME]
//!        [--plan auto|naive|round-robin] [--plan-profile p.json] [--plan-replicas] [--profile p.json]
//!        [--report-utilization] [--max-batch N] [--no-deferred-grads] [--no-jit]
//!        [--no-chains] [--no-epilogues] [--per-element-maps] [--keep-best best.safetensors]
//!        [--patience N] [--replicate NODE=R ...] [--replica-sync N]
//!        [--lr-schedule constant|step|cosine] [--warmup N] [--step-size N] [--gamma X]
//!        [--min-lr X] [--init-embedding NAME=vectors.txt ...] [--freeze NAME ...]
//!        [--max-staleness K|NODE=K ...] [--staleness-schedule uniform|layerwise]
//!        [--slow-worker W=F[@START..END] ...] [--worker-speed W=S ...]
//!        [--processes P [--process I --hostfile FILE --cluster-key FILE]]
//!        [--connect-timeout SECONDS]
//!        [--link-latency-us US] [--link-bandwidth-mbps MBPS]
//! amprun eval  MODEL --params ckpt.safetensors --data d.jsonl   loss, accuracy, instances/s
//! amprun infer MODEL --params ckpt.safetensors --data d.jsonl [--output FILE]
//!                                         one JSON line per instance; labels may be absent
//! amprun grad  MODEL --params p.safetensors --data d.jsonl --out grads.safetensors
//! amprun data get sst [--dir DIR] [--from URL|FILE|DIR] [--timeout S]
//!                                         download, verify and cache SST
//! amprun data list [--dir DIR]            the data sets' names, which are present, where
//! amprun data path NAME [--dir DIR]       the file a name stands for
//! amprun report RUN.jsonl... [--trace t.json ...] -o report.html
//!                                         one HTML page of runs' --metrics files
//! ```
//!
//! For example, from the repository root (a few seconds in release mode):
//!
//! ```sh
//! cargo run --release -p amprun -- train examples/list_reduce.amp -D hidden=32 \
//!     --data examples/data/list_reduce.train.jsonl --valid examples/data/list_reduce.valid.jsonl \
//!     --epochs 10 --optimizer adam --lr 0.003 --min-update-frequency 8 \
//!     --save list_reduce.safetensors --metrics list_reduce.metrics.jsonl
//! cargo run --release -p amprun -- eval examples/list_reduce.amp -D hidden=32 \
//!     --params list_reduce.safetensors --data examples/data/list_reduce.valid.jsonl
//! ```
//!
//! **Data.** The format comes from the extension (`.jsonl`/`.json`, `.txt`/`.ptb`, `.csv`,
//! `.sdf`) or `--format`; instances are checked against the graph's input schema. The
//! first bad instance ends the run with `file:line: field ...: what` (exit 1, nothing
//! written); `--skip-bad-data` skips bad ones and reports the count. `--limit N` reads
//! only the first N instances of each file (skipped ones do not count): files are read as
//! streams, line by line, so nothing after them is read (a pipe that never ends too), a bad
//! line there does not matter, and a PTB vocabulary built by the run comes from those N. A
//! line longer than 256 MiB (docs/limits.md) ends the load with an error, whatever
//! `--skip-bad-data`. A UTF-8 byte-order mark at the start of a file is ignored. JSON Lines: an object that repeats a key is a bad instance
//! (``duplicate key `label` ``). CSV: `--scale` multiplies the f32 columns (0.0625 for the
//! 0–16 digits; NaN or infinity is a usage error). PTB: `--vocab FILE` is read when it
//! exists, else built from the training file (`--vocab-size`, default the model's
//! `vocab`) and written there; eval, infer and grad need it. SDF:
//! `--node-kinds`/`--edge-kinds` default to the model's `kinds`/`edge_kinds`.
//!
//! **Data sets by name.** `--data` and `--valid` take the name of a real data set in place
//! of a file (`amp_data::catalog`; data/README.md): `digits` and `molecules:train` /
//! `molecules:test` are in the repository's `data/` folder (the checkout the binary was
//! built from), `sst:train` / `sst:dev` / `sst:test` in the cache folder (`$AMP_DATA`, else
//! the platform's cache folder followed by `amp`, `~/.cache/amp` on Linux). A name wins
//! over a file of that name in the working folder (`./digits` is the file). A name whose
//! file is absent, an unknown split and `sst` without a split are usage errors (exit 2)
//! that say what to do: ``the data set `sst` is not downloaded (~/.cache/amp/sst/train.txt
//! is absent): `amprun data get sst` fetches and verifies it``. `amprun data get sst`
//! downloads the PTB release of the Stanford Sentiment Treebank from its canonical address
//! (`https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip`), or takes it from
//! `--from`: a mirror's `http(s)://` address, a local copy of the zip, or a folder holding
//! `train.txt`, `dev.txt` and `test.txt`. Only those three entries are read from the
//! archive (as `trees/FILE` or `FILE`; an entry with `..`, an absolute path or deeper
//! folders is never taken, nor written anywhere), each through a limit of 16 MiB whatever
//! its header says, from a download of at most 64 MiB that must finish within `--timeout`
//! seconds (default 300; connecting and the answer's headers too), with a progress bar on a
//! terminal. Each file must have the official number of trees (8,544 / 1,101 / 2,210),
//! every line a labelled binary tree, and the SHA-256 of the published file; otherwise
//! nothing is stored and the error names each file and what differs (the count, the line,
//! or both digests), exit 1. A download that fails (no answer, an HTTP error, a
//! connection cut short: `the download ended after N of M bytes`, the timeout) is exit 2.
//! The verified files go into `sst/` of the cache folder (`--dir DIR` for another) through
//! a temporary folder beside it that is renamed into place, with `SHA256SUMS` (in
//! `sha256sum`'s format) and `SOURCE`, so an interrupted `get` leaves the cache as it was;
//! a `get` when the files are present and verify downloads nothing. `amprun data list`
//! prints every name with its status (`bundled`, `cached`, `missing`), instances and path;
//! `amprun data path NAME` prints the path alone, for scripts.
//!
//! **Training.** Parameters start from `--seed` (PyTorch's initialisations), from
//! `--init FILE` (any safetensors file with the model's `state_dict` names, e.g. written by
//! PyTorch), or with `--resume` from the `--save` checkpoint; parameters holding a NaN or
//! an infinity are refused there as in eval, infer and grad (exit 1, naming the tensor:
//! ``tensor `l2.weight` holds NaN at index 5``). Each epoch shuffles the
//! training instances deterministically from (seed, epoch) (`--no-shuffle` keeps file
//! order) and trains with the `dropout` masks of (seed, epoch, each instance's index in
//! the file), so a resumed run masks as an uninterrupted one; then it reports; then `--valid` is
//! evaluated with that epoch's parameters (forward only, through the same graph, on the
//! training's workers) and reported on the line under the epoch's training line; with
//! `--keep-best FILE` the parameters of each epoch that beats the best validation accuracy
//! so far (or loss, for a model without one) are written there, and `--patience N` stops
//! training once N validations in a row did not beat it; then the checkpoint is written
//! atomically, with that verdict. The
//! checkpoint holds the parameters, optimizer state and the metadata `model`, `epoch` (epochs finished), `seed`,
//! `shuffle_epoch`, `data_position`, `instances`, `status`, `optimizer`, and after a
//! validation `best_epoch`, `best_score` and `since_best` (the validations since the best
//! that did not beat it), so that a resumed run keeps the best so far and the patience
//! count as an uninterrupted run does (one resumed where `--patience` had run out trains
//! nothing). `--epochs N` is
//! the total: a resumed run trains the epochs after the checkpoint's up to N, and ends
//! with exactly the parameters an uninterrupted run would have (a checkpoint whose `epoch`
//! or `seed` is malformed is refused, showing the value). `--min-update-frequency M`
//! is the minibatch size (updates with the mean gradient of M finished instances);
//! `--async` lets instances flow past update boundaries (AMPNet's asynchronous mode;
//! without it, training is minibatch SGD whatever the workers and `--max-active-keys`).
//! `--max-active-keys` defaults to the update size M (see Defaults). Up to a minibatch in
//! flight is the same minibatch SGD with its instances batched, equal to one in flight to
//! float rounding (batches form as messages meet, and sums change order). On one worker (or
//! several, when the plan keeps the model on one) a run is reproducible bit for bit at any
//! `--max-active-keys` (the worker admits the instances itself, also at the update
//! boundaries); split over several workers only to rounding.
//! Under `--async` an update applies whatever gradients have arrived, averaged over the
//! instances counted finished since the last update, at least M: instances in flight move
//! through the graph together and often finish together, and all that finish in one step
//! of a worker (or that a worker hears of at once from another) count before it updates.
//! With more in flight than M, updates may cover more than M instances; the metrics'
//! `updates` (summed over parameter groups) tells how many ran. The workers admit the
//! instances themselves (the one that finishes an instance starts the next), so on one
//! worker `--async` training is reproducible bit for bit too. An
//! epoch is one run of the workers: the pipeline fills once, stays full (`--max-active-keys`
//! in flight) and drains only at the epoch's end, where the owners apply what gradients
//! are left (so every checkpoint is taken with none pending).
//!
//! **Defaults.** With no tuning flags, training updates after every 16 instances
//! (`--min-update-frequency 16`) with the minibatch in flight together (`--max-active-keys`
//! defaults to M; eval, infer and grad keep 16 in flight), and plain SGD's rate is
//! `0.01 · √M` (0.04; `--lr` sets it, Adam's default stays 0.001). Why: one instance in
//! flight with an update after each, the defaults before, runs every Linear node and fused
//! kernel on one row at a time and pays an update per instance; with the minibatch in
//! flight, its instances move through the graph together and a GEMM or kernel call takes
//! the rows of all that meet at its node (`--profile` shows rows per call). 16 is the update size the
//! canonical models' recipes use (docs/learning.md) and what fills the batches of the
//! fine-grained models; √M keeps an epoch's progress near per-instance SGD at 0.01 (the
//! mean gradient of M instances has about 1/√M of one's noise), where M · 0.01 (the linear
//! rule) diverged on list-reduce and GGSNN and 0.01 itself learned far slower per epoch
//! (MoE 17% after 5 epochs instead of 93%). Against the old setting, on this machine
//! loaded by other builds (medians of 5 alternating runs, docs/experiments/defaults/):
//! training runs 1.5× as fast on list-reduce and the MLP, 1.15× on Tree-LSTM, and about
//! the same on GGSNN (0.96×: its batched maps already make a graph one message) and MoE
//! (0.93×: 16 instances over 64 experts give an expert call a row or two). Per epoch the
//! defaults learn slower at first (16 times fewer updates); after the same epochs,
//! held-out: list-reduce 59% against 41% (epoch 4), MoE 94.6% against 93.2% (epoch 5),
//! GGSNN 63% against 71% (epoch 8), the root-only Tree-LSTM 27.7% against 32.0% (epoch 2),
//! and the MLP's training accuracy 95.6% against 98.7% (epoch 10). The README's
//! list-reduce command (Adam, an update every 16) gets 82.6% validation accuracy after 12
//! epochs with 16 in flight (84.0% with `--max-active-keys 1`), in 10 s instead of 14 s on
//! the quiet machine.
//! `--deterministic` is the setting before in one flag: one worker, one instance in flight
//! and, without `--min-update-frequency`, an update after every instance at 0.01
//! (per-instance SGD, as before). `ampc compile --workers N` plans for the same default update size.
//!
//! **Learning-rate schedules.** The rate is set per epoch, as PyTorch's schedulers are
//! stepped once per epoch (`scheduler.step()` after each, as their documentation shows),
//! so a resumed run recomputes it from the epoch number. `--warmup N` trains epoch e <= N
//! at `lr · e / (N + 1)` (PyTorch's `LinearLR(start_factor=1/(N+1), total_iters=N)`), then
//! the schedule starts from `lr` with k = e − N − 1 epochs behind it: `constant` keeps
//! `lr`; `step` multiplies it by `--gamma` (default 0.1) every `--step-size` epochs
//! (`StepLR`); `cosine` anneals it to `--min-lr` (default 0) over the `--epochs` − N epochs
//! after warmup, `min + (lr − min)(1 + cos(π k / T))/2` (`CosineAnnealingLR(T_max=T)`; an
//! epoch past T, in a longer resumed run, stays at the minimum). A flag of another schedule
//! is a usage error. Each epoch's rate is in its training line (`lr 1.000e-3`, when it
//! varies) and its metrics (`lr`).
//!
//! **Pretrained embeddings, frozen groups.** `--init-embedding emb=glove.6B.300d.txt` writes
//! word vectors (GloVe or word2vec text: a word and its numbers per line, word2vec's
//! `COUNT DIM` first line allowed) into the rows of the Embedding `emb` whose vocabulary
//! words the file has, after the usual initialisation (`--seed` or `--init`), and reports
//! `--init-embedding emb: 4012 of 5000 vocabulary words found among 400000 vectors in
//! glove.6B.300d.txt (80.2%)`; the other rows keep their values. The vocabulary is the PTB
//! run's (`--vocab`, with `--lowercase` lowercasing the file's words too: the first of
//! `The` and `the` gives `the`'s row); for other data `--vocab FILE` (one word per line,
//! `<unk>` first) names the word of each row index. The file is read line by line and only
//! its vocabulary words' vectors are kept (memory is the vocabulary's, whatever the file's
//! size); the last DIM fields of a line are the vector (so GloVe 840B's words with spaces
//! read), a word's first line counts. A dimension other than the table's, a short line, a
//! number that is not finite and a line over `DIM · 64 + 4096` bytes are errors naming
//! `file:line` (exit 1); a NAME that is not an Embedding, or a run without a vocabulary,
//! is a usage error. `--freeze NAME` keeps the parameter group NAME (a `param`: `emb`,
//! `cell`; an array's name freezes each of its layers) as it starts: no gradient is
//! accumulated for it and it is never updated (nor decayed), while gradients still flow
//! through it to what comes before. A Linear layer's weight and bias are one group
//! (`--freeze cell.weight` is refused, naming `cell`).
//!
//! **Inference.** `amprun infer` writes one JSON object per instance, in input order, to
//! stdout or `--output FILE`: `instance` (its index among the instances read), `output`
//! (the forward output), `argmax` (for an output of more than one element; the first of
//! equals), and `probabilities` (the output's softmax) when the output is the logits of a
//! cross-entropy loss. It runs batched on `--workers N` with `--max-active-keys K` in
//! flight, like training. Its data needs only what the forward computation reads: a field
//! that only the loss reads (the label: `label` of the record, each tree node's `label`, an
//! `mse` target) may be absent, and is ignored when present (it is not even range-checked).
//! JSON Lines: leave the key out. CSV: rows without the label columns, or with them (told
//! by the first row's width). SDF: the label property may be missing. PTB: the label is
//! part of the bracket syntax, so unlabeled trees keep the brackets with any int in the
//! labels' place (`(0 (0 The) (0 Rock))`); they are ignored. A rolled-out network reads
//! `{"frames": [...]}` alone; with `--frame-noise` the static instances keep their labels.
//! `eval` and `grad` still need every label.
//!
//! **Staleness.** A gradient's staleness, in a parameter group, is the number of the
//! group's updates between the version its instance's forward messages read (the oldest,
//! when they read several) and the version it is applied to: 0 in synchronous training,
//! often more under `--async` with several instances in flight. Each epoch's metrics
//! report it per group (below); an epoch that measured any above 0 prints a line
//! `staleness: embed 0.42 (max 3), ...` (mean and max per group) under its summary line.
//! `--max-staleness K` bounds it for every group (DSP, bounded staleness): a group
//! defers an update while an instance still in flight read a version K updates old
//! (it keeps accumulating, and updates once that gradient came or the instance ended), so
//! no gradient is applied more than K updates late; `--max-staleness NODE=K` bounds one
//! group (a node's label, `%index` or a parameter array's name; it overrides the
//! others). `--staleness-schedule layerwise` gives the group nearest the loss K (0 without
//! `--max-staleness K`) and each group before it (in the graph's order) one more, as DSP
//! lets lower layers use staler parameters. K = 0 with one instance in flight trains as
//! synchronous training does (the same losses); without a bound, `--async` is unchanged.
//! While a group defers an update, admission holds: no new instance starts until the
//! instances in flight that it waits for have ended and it updated (DSP's FIFO between
//! stages), so a group updates within about `--max-active-keys` instances past its
//! `--min-update-frequency`, not all at the end of the epoch. A replicated group's bound is at least `--replica-sync` (its replicas read values up to
//! a sync old); a smaller one is refused.
//!
//! **Several processes.** `--processes P` splits the workers over P processes
//! (docs/distributed.md): alone, it starts P - 1 more processes of this binary on this
//! machine over loopback (this one is process 0, and names each child's pid); with
//! `--process I --hostfile FILE --cluster-key FILE`, this is process I of a run across
//! hosts (the hostfile lists one `host:port` per process; the key file is the same on every
//! host). Process `p` runs a contiguous block of the `--workers`; process 0 runs the
//! controller and writes metrics, progress and checkpoints (gathered from every process:
//! the file is a one-process run's; `grad`'s file the same way), the others print only
//! errors. Every process reads the data itself. Processes prove the shared key before anything else is read from their
//! connection, and refuse a peer whose binary, graph, worker count or any other flag differs,
//! naming it (only `--process`, `--hostfile`, `--cluster-key`, `--connect-timeout`, the model's
//! path and the paths of output files may differ). Each process waits at most
//! `--connect-timeout` seconds (default 60) for the others to connect, then names those that
//! did not. A lost
//! process ends the run on the others within seconds, naming it (exit 4). Only process 0
//! sees the validation: after each epoch's it tells the others whether the epoch is the
//! best and whether `--patience` ran out, so every process gathers the `--keep-best` file
//! (a one-process run's) and stops after the same epoch. A `--replicate` copy may run in
//! another process than its node: its gradients come to the node's process before each
//! update, the values go back after every `--replica-sync`-th (synchronous training
//! then gives the one-process losses), provided the node's producers and consumers run in
//! one process. `--max-staleness` holds across processes too (an owner forgets a read
//! once it heard that its instance ended; owners elsewhere hold process 0's admissions),
//! and every group's staleness reaches the metrics. Not yet with a parameter used on
//! workers of two processes, a bounded group's replica in another process, nor over
//! more than 16 processes (each refused with a clear error). `--plan auto` plans for the processes: an edge cut between two of them
//! costs the link's latency (`--link-latency-us`, default 50 µs one way) over the
//! `--max-active-keys` in flight, its bandwidth (`--link-bandwidth-mbps`, default 10000)
//! and more per message than between threads, so the plan crosses a slow link only where
//! that pays; a plan stored in the `.ampg` file for other processes or another link is not
//! used (`ampc compile --processes P --link-latency-us ...` makes one).
//!
//! **Stragglers.** `--slow-worker W=F` makes worker W take F times as long for each step
//! (a batch and the updates after it): it sleeps F - 1 times the step's measured time
//! after it, so its work stays real (the sleeps are summed and taken a millisecond or more
//! at a time, since a sleep overshoots by tens of microseconds and steps take a few).
//! `W=F@START..END` slows it only between those seconds since the executor started (a
//! straggler that comes and goes); F is 1 to 1000, and a worker that the run does not
//! have is an error. What is trained does not change (synchronous runs give the same
//! losses to rounding), only when. Replicas (`--replicate`) send each message to the
//! copy expected to finish it first: its messages queued or running, plus this one, times
//! its service time (a moving average of its measured time per message, a straggler's
//! sleep included); one message in 32 goes to each copy in turn, so a copy that sped up is
//! measured again. A copy F times slower gets a message only once the others have about F
//! messages ahead of it (measured in docs/experiments/stragglers/). `--worker-speed W=S` tells the planner (`--plan auto`)
//! that worker W runs at S times the others' speed (`1=0.33`: three times slower): a
//! worker's predicted time is its work over its speed, so the plan gives a slow worker
//! less (the metrics' `predicted_speedup` counts it); a plan stored in the `.ampg` file
//! for other speeds is not used. It changes the placement only, not how fast a worker is.
//!
//! **Reports.** On a terminal a progress bar (stderr) shows instances/s, loss and
//! accuracy; otherwise one line per epoch. `--metrics FILE` gets one JSON object per
//! report (appended to when resuming). The first (and each resumed run's first) is the run
//! itself: `split: "run"`, `model`, `command` (the arguments), `amprun` (the version),
//! `commit` (the build's, `unknown` outside a git clone), `host`, `os`, `arch`, `cores`.
//! Then per epoch: `split` (`train`/`valid`), `epoch`, `instances`,
//! `loss`, `accuracy` (when the model classifies), `instances_per_s`, `elapsed_s`, and
//! for training `updates` and `staleness`: per parameter group `{"group", "mean", "max",
//! "gradients", "bound"}` (the instances' gradients measured, an instance applied over
//! two updates counting in both; `bound` null when unbounded); split over processes,
//! `network`: what process 0 exchanged with the others during the epoch's training
//! (`messages_sent`/`_received`: forward and backward messages; `packets_*`; `bytes_*`:
//! Amp's packets, without timely's 48-byte frame header each), and with copies of the graph
//! in several processes `allreduce`: `updates` (all-reduces of the group that made the
//! most), `bytes_sent` and `bytes_per_update` (the gradients process 0 sent, in all and per
//! all-reduce of every group; each process sends about as much). `--tensorboard DIR` writes
//! the same reports' scalars as a TensorBoard event file in DIR (made if missing; a resumed
//! run adds a file): `train/loss`, `train/accuracy`, `train/instances_per_s`, `train/lr`,
//! `valid/loss`, `valid/accuracy`, `valid/instances_per_s` and per parameter group
//! `staleness/GROUP/mean`, `/max` and `/bound`, each at step = the epoch, for
//! `tensorboard --logdir DIR`. `--report FILE` writes, when the run ends (also when it
//! stops on a NaN loss, a failure or Ctrl-C), the page `amprun report` makes of its metrics, with
//! the model's graph drawn (laid out in Rust, no Graphviz needed; up to 400 nodes) with
//! each node in its worker's colour, each fusion group (one JIT kernel) as one box, the
//! edges between workers dashed red, and, when the run measured (`--profile`, `--trace` or
//! `--report-utilization`), each box's measured time per instance; the wheel and the
//! buttons zoom it, dragging pans it (a small inline script). `amprun report RUN.jsonl... -o FILE`
//! makes one self-contained HTML page (inline SVG and CSS, nothing fetched) of
//! one or more `--metrics` files, each run in its own colour on shared axes: a table of
//! each run's last epoch, best validation accuracy and plan, each run's command line,
//! build (version and commit) and machine, then the loss and accuracy per
//! epoch (training solid, validation dashed), the validation accuracy over time, the
//! learning rate, the training throughput
//! over time, each parameter group's staleness (mean solid, max dotted, the bound grey),
//! for rolled-out networks the accuracy per update step, and for each `--trace` (a `train
//! --trace` file; `train --report` uses its own) every worker's busy share over time beside
//! the plan's predicted utilisation. A line that is not a JSON object is refused with its
//! file and line. `--trace FILE` writes a
//! Chrome/Perfetto trace of every worker's forward, backward and update work (`args`: the
//! `batch` of messages a call took, their `rows` and `instances`; split over processes,
//! one file on process 0: a process per process, a row per worker, one clock); an update
//! carries `staleness` in its `args` (its stalest gradient). A summary ends the run on
//! stdout.
//!
//! **Files written.** `--save`, `--metrics`, `--trace`, `--profile` and grad's `--out` are
//! checked before any work: the directory must exist and take a new file, and a path that
//! exists must be a regular file. A symbolic link, a FIFO, a device (`/dev/null`) or a
//! directory is refused (exit 2), never replaced by the checkpoint's rename nor written
//! through. A save also removes the temporary files (`.NAME.PID.N.tmp`) that a save into
//! the same file left when it was killed, those of processes that are gone (on Linux; on
//! other systems they stay), and nothing else.
//!
//! **Copies of the graph.** With `--workers N` and `--plan auto` (the default), the planner
//! first chooses a layout: k copies of the whole graph, each placed over N/k workers, for
//! the k dividing N that its cost model predicts fastest (with fewer copies on a tie within
//! 2%; `amp_plan::plan_workers`, `compiler/plan/src/layout.rs`). amprun prints it at the start,
//! `amprun: 2 copies × 1 stage on 2 workers (predicted 1.83×), plan` (with `, 1 idle` after
//! the workers when the plan leaves some without nodes), the summary's placement line names
//! the copies, and the metrics' plan object has `copies`. `--copies K` sets k (it
//! must divide N; `--copies 1` keeps one copy spread over every worker), and the prediction
//! printed is the cost model's for that layout (`amp_plan::plan_copies`). An instance runs on
//! one copy from its admission to its end; a copy that finishes an instance takes the next
//! one, so a copy given large instances is not sent more, and a window admitted at once
//! (synchronous training's, after each update) is shared among the copies by the
//! instances' sizes (their sequences' elements and trees' nodes): the largest first, each
//! to the copy with the least so far. Each copy accumulates its own
//! gradients, and before each update the owners of the parameter groups (on copy 0's
//! workers) add the other copies' into theirs and update; each other copy then takes the new
//! values on its own worker, before its next step (without a staleness bound; under one, the
//! owner gives them, so that no read is older than the bound checked):
//! synchronous training with copies is minibatch SGD over all the copies' instances (to
//! rounding: sums in another order), asynchronous training counts and bounds the staleness
//! of every copy's reads as of one copy's. Split over processes (`--processes P`), each copy
//! runs in one process (k is a multiple of P, or 1 for stages over every process): each
//! process adds up its own copies' gradients, the processes all-reduce those sums around a
//! ring (each sends 2(P − 1)/P of the gradients per update, no process serves the others'
//! parameters), and each process applies the same update to its own values, which stay equal
//! bit for bit; process 0 counts the instances and starts each reduction, and the metrics'
//! `allreduce` has its bytes. A staleness bound holds there too (each process checks
//! its own copies' reads before it takes part in an update), from 1 up: a read made while a
//! reduction is under way is applied by the next one. In asynchronous training the next
//! update waits for the last reduction: with a slow link the updates come fewer and larger. Today copies keep one copy of the values per copy in
//! memory and cannot be combined with node replicas (`--replicate`, `--plan-replicas`). `--workers` defaults to the cores this
//! process may use (1 with `--deterministic`, one per process with `--processes`; the
//! environment's `AMP_WORKERS` sets it for every run), and the plan decides how to use them; `--workers 1` keeps every node on one worker, reproducible
//! bit for bit. docs/PERFORMANCE.md, "Copies of the graph", has the speedups and the case
//! where copies lose: the MLP with an update every 8.
//!
//! **Placement.** With `--workers N` the nodes of a copy go where the partition plan puts them
//! (`--plan auto`, the default): the `.ampg` file's plan when it was made for N workers and
//! this run's training setup
//! (`ampc compile --workers N [--min-update-frequency M] [--optimizer sgd|momentum|adam] [--async]`,
//! whose defaults are amprun's), else a plan computed in-process by `amp-plan` (its cost
//! model takes `--min-update-frequency` as the update period and, with `--optimizer sgd` and
//! no weight decay, updates that touch only what instances used; `--plan-profile FILE`
//! refines it with a profile). A fused group of elementwise nodes is placed as one unit. A
//! plan may leave workers without nodes when splitting the model costs more in messages
//! between workers than it takes over (amprun notes it; `--plan naive` splits anyway).
//! `--plan naive` keeps the executor's contiguous ranges, `--plan round-robin` deals the
//! nodes out in turn. The plan also lists the replicas its cost model predicts to pay (a
//! Linear or Embedding node as copies on the next workers, each copy taking a share of the
//! node's messages but making them cross workers, and synchronised after every update; the
//! plan table's `replicas:` lines, with the predicted speedup with them); `--plan-replicas`
//! runs them (`--replica-sync` applies, `--replicate` overrides a node's count; the
//! summary and the metrics' plan object then give the utilization and speedup predicted
//! with them, and the object lists them as `replicated_nodes`). They are
//! off by default: on two workers, replicas of the heaviest products of Tree-LSTM, GGSNN
//! (hidden 32 and 128) and the MLP each ran slower than the plan without them (0.44-0.91x
//! of it; docs/PERFORMANCE.md, "Replicas"), and the planner proposes none there. A plan in an `.ampg` file that does not fit its graph (a worker out of
//! range, a node missing or unknown) is refused (exit 1), whatever the worker count, and so,
//! in training, is a graph in which the cost model finds a cycle that never lets its
//! messages go (its exit leads back into it: an instance's messages would never end). With
//! more than one worker (or `--report-utilization`) the summary and the metrics (an object
//! with `split: "plan"`) give each worker's predicted utilization; measured utilization (the
//! share of the training calls' wall time a worker was not waiting for messages: its ops, the
//! routing around them and its updates) is reported with `--report-utilization`, `--trace` or
//! `--profile`. `--profile FILE` writes, per node, events per instance and mean µs of its
//! forward, backward and update work, its messages per instance (what a cut input edge
//! carries, however the node batches them) and the instances its events served, with the
//! instances the run kept in flight, for `ampc compile --profile` and `--plan-profile`: from
//! these the planner bounds what a split can gain when the instances move through the nodes
//! together (an instance's time in its steps over the instances in flight; the plan table's
//! `latency bound`). The same file holds `batches`, which the planner does not read: per
//! kind of node (the op's keyword, `fused` for a fused kernel, `chain` for a chain of
//! routing nodes) and direction, the calls, the
//! rows they took (a batched map's message carries a row per element, any other message
//! one), the mean rows per call and a histogram (calls of 1, 2, 3-4, 5-8, ... 129+ rows);
//! the summary prints a line per kind that batches (`batches     linear forward: 34.7
//! rows/call (median 17-32), 1726 calls`). And it holds `time`: where the workers' time
//! went, every second of it in one bucket (the calls of each kind of node, forward and
//! backward; `updates`; `between nodes`, the executor's own work around the calls: its
//! queues, keys, credits and sends, and the timing itself; `waiting` for messages), each
//! with its seconds, µs per instance and share, adding up to the workers times the training
//! time; the summary prints it per instance (`time        per instance: linear 42.5 µs
//! (32%), fused 29.6 µs (22%), ..., between nodes 16.8 µs (12%), updates 3.5 µs (3%),
//! waiting 0.2 µs (0%)`).
//!
//! **Speed.** Each fusion group of elementwise nodes runs as one kernel that Cranelift
//! compiled when the graph was loaded (`amp-jit`); `--no-jit` runs its nodes one by one
//! instead (same results to rounding, to compare speed). Each chain of routing nodes
//! (`phi`, `cond`, `switch`, `isu` passing messages to one another) runs as one node;
//! `--no-chains` runs them one by one (same results). An elementwise activation that alone
//! reads a Linear's output (`relu(l1(x))`) runs inside the Linear's step; `--no-epilogues`
//! runs it as a node of its own (same results). A `map` whose body is row-wise runs
//! as one message per collection (docs/IR.md, Batched maps); `--per-element-maps` compiles
//! an `.amp` model with every `map` one message per element instead (same results to
//! rounding, to compare speed). Linear nodes and fused kernels
//! take up to `--max-batch` waiting messages (default 64) as one call (other nodes take
//! them in one step of the worker, one by one). A Linear node's messages wait until the
//! worker has nothing else queued; then it serves the forward work before the backward,
//! the Linear nodes nearest the source first (backward: farthest first), so that a node
//! runs once on everything that reaches it: a Tree-LSTM's classifier runs once on the roots
//! of all trees in flight, and their backward levels then meet at the cell as the forward
//! ones did (DyNet's agenda, TensorFlow Fold's depth batching); a node's messages of one
//! direction and port passed over 256 times go first. A Linear node's
//! weight-gradient products are kept and added as one GEMM; `--no-deferred-grads` adds them
//! per backward batch (with `--max-batch 1`, nothing is batched: to measure what batching
//! gains). `--replicate
//! cell=2` runs the Linear or Embedding node `cell` (a label or `%index`) as 2 copies on
//! consecutive workers, each forward message going to the copy expected to finish it first
//! (see Stragglers) and its gradient back to the copy that served it; the copies take the
//! trained values after every `--replica-sync N` updates (default 1: training is then
//! exactly that without replicas). `ampc compile --workers N --emit plan` proposes
//! replicas where its cost model predicts they pay, and `--plan-replicas` runs them (see
//! Placement).
//!
//! **Exit codes.**
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | bad input: the model does not compile (diagnostics printed), the graph file is rejected by the loader or the verifier, a data instance is bad (`file:line: field ...`), a parameter file does not fit the model or holds a NaN or an infinity, a node cannot process an instance (``node %5 `if` (cond) at m.amp:7:27 on worker 0 failed on instance 1 (d.jsonl:2): cannot evaluate the predicate on this instance: ...``: the node, where its expression is in the model, and the data line; a failed index says why: `index 5 is outside tokens, which has 5 elements`), a value of the data outside the model's ranges (a label ≥ the classes, a token ≥ the vocabulary: found before training, skipped by `--skip-bad-data`; a label the model guards, `if label < classes { cross_entropy(y, label) } else { ... }`, may be larger: it marks an unlabeled node), a loop past `--max-trips` (default 2^20) or a collection past 2^24 elements in one instance (docs/limits.md), or the model uses an op the executor cannot run yet |
//! | 2 | usage: bad flags or values, a file that cannot be read or written |
//! | 3 | a NaN/Inf loss: `loss of instance I (file:line) is NaN at node loss (%N); training stopped in epoch E`; with `--save`, the checkpoint holds the last good parameters, those of the start of epoch E (the parameters after an update that blew up are never written): a checkpoint this run wrote, or resumed from, holds them already and is left untouched (the message says so); a run stopped in its first epoch leaves an existing `--save` file as it was too (a fresh run that blows up at once does not replace a trained checkpoint with its starting parameters; a run that finished an epoch replaces it, as `--save` names this run's output); otherwise they are written, with the optimizer state and `status = stopped: ...` |
//! | 4 | the executor failed: a worker panicked, stalled (`--stall-timeout`) or left messages behind; the message names the node and the worker |
//! | 130 | `train`: Ctrl-C (SIGINT) stopped it after the epoch in progress, with that epoch's checkpoint (`--save`), metrics and `--report` page written: `amprun: stopped by Ctrl-C after epoch E; c.safetensors holds it`, and `--resume` continues from there. A second Ctrl-C stops the process at once; the last checkpoint stays whole (a checkpoint is replaced by a rename). A run split over processes keeps the default (each process stops at once) |
//!
//! Networks rolled out over frames (docs/rollouts.md): `--network NAME [--pattern
//! streaming|sequential|EDGES] [--frames F]` after an `.amp` file compiles that network
//! instead of a model; instances are JSON Lines `{"frames": [[...], ...], "label": k}`, and an
//! instance with no frame or with another number than F is bad input named by
//! `file:line: field `frames``. The loss is the mean over the frames; `infer` prints one
//! frame's output and `eval` counts an instance by one frame's (the last reported), and
//! prints the accuracy per update step (with `--metrics FILE`: one JSON row per step).
//! `--frame-noise S` reads static inputs (a CSV row, `{"frame": [...], "label": k}`) and
//! shows each for the F frames with fresh seeded Gaussian noise per frame (`--seed`).
//!
//! Layout: `cli` (flags), `model` (compile or load, verify), `data` (loaders, instance
//! lines), `placement` (partition plan, utilization, profile), `setup` (executor and
//! parameters), `start` (fresh, `--init` or resumed parameters; checkpoint metadata),
//! `frames` (a rolled-out network's instances, `--frame-noise`), `steps` (accuracy per
//! update step), `schedule` (learning rate per epoch), `embeddings` (`--init-embedding`,
//! `--freeze`), `train`, `commands` (eval, infer, grad),
//! `report` (progress, metrics, traces), `datasets` (`amprun data`, names resolved to
//! files, verification, the atomic store), `download` (an address, a zip or a folder to
//! the wanted files, bounded), `failure` (messages and exit codes).

use amprun::cli::Cli;
use amprun::datasets;
use clap::Parser;
use std::process::ExitCode;

/// The executor allocates a payload and a state per message, on every worker thread:
/// mimalloc's per-thread free lists serve such small, short-lived allocations faster than
/// glibc's malloc. Its arenas stay on 4 KiB pages (`no_thp` in Cargo.toml): with huge
/// pages the kernel zeroed every 2 MiB page whole as the arenas grew while the data
/// loaded, and training ran no faster (docs/PERFORMANCE.md, "Allocation and loading").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    report_worker_panics_briefly();
    let result = match datasets::resolve_names(&mut cli.command) {
        Ok(()) => amprun::run(&cli.command),
        Err(failure) => Err(failure),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if !failure.message.is_empty() {
                eprintln!("amprun: error: {failure}");
            }
            failure.exit.into()
        }
    }
}

/// A worker's panic ends the run with the executor's error, which names the node and the
/// worker; the default hook would add a backtrace from inside the executor's catch. Keep
/// one line with the location (for bug reports); other threads keep the default hook.
fn report_worker_panics_briefly() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        match thread.name().filter(|n| n.starts_with("amp-worker-")) {
            Some(name) => {
                let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
                eprintln!("amprun: {name} panicked{at}");
            }
            None => default(info),
        }
    }));
}
