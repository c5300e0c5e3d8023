/**
 * The REST replies of the jupyter-vgpu server extension (docs/rest.md), typed: the GPUs, the
 * slices and the line, refusals, a kernel. `api.ts` re-exports them beside the calls that fetch
 * them; the GPU dashboard's history is typed in `historytypes.ts`.
 */
/**
 * What holds a slice. The server's `HolderKind` (jupyter_vgpu/slices/records.py) lists the same
 * values; tests/test_layers.py and a Jest test (its `holder_kinds` in src/vocabulary.json)
 * check that the two agree.
 */
export type HolderKind = 'kernel' | 'command';

/**
 * Where a slice's usage figure comes from: NVML (`measured`), the kernel itself (`reported`),
 * or nowhere. The server's `usage_sources` (src/vocabulary.json) list the same values; a Jest
 * test checks that the two agree.
 */
export type UsageSource = 'measured' | 'reported' | 'none';

/** One GPU, as `GET /api/vgpu/devices` describes it (the GPU fields of docs/rest.md). */
export interface IDevice {
  index: number;
  uuid: string;
  name: string;
  memory_total: number;
  memory_used: number | null;
  /** What the slices reserve here. */
  memory_reserved: number;
  /** What the slices' processes use here. */
  memory_used_by_slices: number;
  /** What slices use beyond their reservations. */
  memory_over_use: number;
  /** What is used outside slices (processes without a slice, memory no process accounts for). */
  memory_foreign: number;
  /** What one new slice could get here now: the same figure as `jupyter vgpu status`. */
  memory_free: number;
  /**
   * What bursts hold here beyond what no request holds: requests booked memory the bursts grew
   * into, so the GPU is over-full (its processes hold more than it has). The server asks the
   * youngest bursts back at once. 0 or absent otherwise.
   */
  memory_overbooked?: number;
  utilization: number | null;
  /** Points taken after the `since` of the request (all of them without one). */
  history?: IHistoryPoint[];
  mig_mode: boolean;
  tier: string;
  /** The watchdog compares the slices' use here with their reservations. */
  watched?: boolean;
  /**
   * In a pod HAMi or KAI-Scheduler placed on a shared GPU, the pod's share in words ("this
   * pod's share: 4.0 GiB of 16.0 GiB (HAMi)"); `memory_total` is then the share. Null or absent
   * elsewhere.
   */
  pod_share?: string | null;
  /** The card's own memory when `memory_total` is a pod's share. */
  card_memory?: number | null;
  /** The pod's share of the SMs (CUDA_DEVICE_SM_LIMIT), percent. */
  sm_limit?: number | null;
  /**
   * A scheduler's share in words: the pod's (as `pod_share`) or the Slurm job's ("Slurm job
   * 1234: 16/32 shards of GPU 0, 8.0 GiB"); `memory_total` is then the share.
   */
  share?: string | null;
  /** Inside a Slurm job: its id; only the job's GPUs are listed. */
  slurm_job?: string | null;
  slices: string[];
}

/** One point of a slice's or a GPU's history: memory used (bytes) and utilisation (%). */
export interface IHistoryPoint {
  t: number;
  used: number | null;
  util: number | null;
}

/**
 * The GPU node a CPU-only server answers from (`jupyter lab --gateway-url=...`, docs/remote.md):
 * its URL and the node's host name (null when the node does not say).
 */
export interface IGateway {
  url: string;
  node: string | null;
}

/** This machine as a whole (the GPUs' reply's `host`), as jupyter-resource-usage shows a server. */
export interface IMachineUsage {
  /** Busy since the previous reading, all cores together (null on the first). */
  cpu_percent: number | null;
  cpu_count: number | null;
  /** All memory but what is available (bytes). */
  memory_used: number | null;
  memory_total: number | null;
}

export interface IDevicesReply {
  simulated: boolean;
  available: boolean;
  message: string | null;
  driver: string;
  interval: number;
  history_step?: number;
  /** When the server's sample was taken (seconds since the epoch, the server's clock). */
  taken_at?: number;
  devices: IDevice[];
  /** The host name of the server that sampled the GPUs. */
  node?: string;
  /** Present when the server answers from a GPU node behind `--gateway-url`. */
  gateway?: IGateway;
  /** This machine's CPU and memory; absent on older servers. */
  host?: IMachineUsage | null;
}

/**
 * A kernel that runs elsewhere (its launcher's: a Slurm job on a node Slurm picks), as its row of
 * `slices` (running or ending) or of `waiting` (in the engine's line) carries it: one shape for
 * every launcher, in the launcher's words, shown as they come (docs/rest.md, "Kernels that run
 * elsewhere"). The launcher's own fields at the row's top level are not read here.
 */
export interface IElsewhere {
  /** The launcher's name (a kernelspec's "launcher"): "slurm". */
  launcher: string;
  /** The card its kernels are shown in: "Slurm jobs". */
  title: string;
  /** The row's id: a waiting row's ticket, a running row's slice id ("slurm-12"). */
  id: string;
  state: 'running' | 'pending' | 'ending';
  /** What the state means, one sentence: "Slurm runs this kernel's job". */
  state_title: string;
  /** Where it runs and what it holds, the parts of one line: ["Slurm job 12 on node1", "GPU 0", "8/32 shards (1/4 GPU)"]. */
  where: string[];
  /** The first of them: where it runs, in a few words ("Slurm job 12 on node1"). */
  name: string;
  /** Why a pending one waits, in the engine's word ("Resources"). */
  reason: string | null;
  /** And in words ("no node has the GPU shards free now"); null: not known. */
  reason_text: string | null;
  /** Where it stands in line, in words ("place 1 in partition gpu's queue"). */
  place_text: string | null;
  /** What holds its memory, or why it is ending or unfenced (the row's `share_note`). */
  note: string | null;
  /** Why the engine ended the kernel this one replaced (a restart elsewhere). */
  ended: string | null;
  /** A pending or ending one: `DELETE /api/vgpu/waiting/<id>` takes it out. */
  cancel: boolean;
  /**
   * Asked of the server, read when it sends them (each has a fallback): the engine's own id of
   * the kernel's job ("12"), the engine's name ("Slurm"), its line in words ("Slurm's queue"),
   * and the sentence the card shows under a row that is ending or runs unfenced.
   */
  ref?: string | null;
  engine?: string | null;
  line?: string | null;
  notice?: string | null;
  /** The GPUs where it runs are simulated (JUPYTER_VGPU_SIMULATE there), as its kernel reports. */
  simulated?: boolean;
}

/** A launcher of this server's kernels other than `local` (the slices reply's `launchers`). */
export interface ILauncherInfo {
  name: string;
  /** Its card's title: "Slurm jobs". */
  title: string;
  /** Where a kernelspec of it puts its kernels, in words (one sentence, no full stop). */
  runs: string;
  /** The display names of its kernelspecs. */
  kernelspecs: string[];
}

/** The state of a slice's usage against its reservation, decided by the server. */
export type SliceState = 'ok' | 'near' | 'over' | 'unknown';

/** A slice's request as the ledger keeps it (docs/rest.md, "SLICE"). */
export interface ISliceRequest {
  fraction: number | null;
  memory: number | null;
  gpus: number;
  /** An elastic slice's limit, as asked: a share of each GPU (absent without a limit). */
  limit_fraction?: number | null;
  /** Or an amount per GPU, in bytes (absent without a limit). */
  limit_memory?: number | null;
}

/**
 * One reservation: a kernel's or a `jupyter vgpu run` command's; or a kernel that runs elsewhere
 * (`elsewhere`), whose GPUs are its launcher's (`<launcher>:<node>:<index>`), not this server's.
 */
export interface ISlice {
  /** A kernel that runs elsewhere: where, in its launcher's words; absent or null for the others. */
  elsewhere?: IElsewhere | null;
  id: string;
  holder_kind: HolderKind;
  /** The slice belongs to the user this server runs as (others' come from a node broker). */
  yours: boolean;
  /** A kernel of this very server (only those can be shut down from here). */
  running_here: boolean;
  kernel_id: string | null;
  kernel_name: string | null;
  kernel_display_name: string | null;
  path: string | null;
  command: string | string[] | null;
  owner: string | null;
  pid: number | null;
  gpus: string[];
  gpu_indices: number[];
  /** The GPU's share the slice holds (a slice asked as an amount has one too: amount / GPU). */
  fraction: number | null;
  /** What was asked (after a resize, the new size): a fraction or an amount. */
  request?: ISliceRequest;
  request_text: string;
  /** Null for a Slurm job until its kernel has said its budget from its node. */
  memory_reserved: number | null;
  /** All GPUs of the slice (what `memory_used` is compared with). */
  memory_reserved_total?: number;
  context_allowance: number;
  memory_limit: number;
  /**
   * An elastic slice (a request and a limit): what frameworks may grow to per GPU, its limit
   * minus the context allowance; null for a fixed slice, absent on older servers. Its
   * `memory_reserved` is then the request (booked, guaranteed), and `state` is against the limit.
   */
  memory_burst_limit?: number | null;
  memory_used: number | null;
  /** Measured memory per GPU uuid (absent or null when not measured per GPU). */
  memory_used_by_gpu?: { [uuid: string]: number | null } | null;
  utilization: number | null;
  usage_source: UsageSource;
  /** The enforcement tier, shown exactly as sent ("cooperative", "hard (MPS)", ...). */
  tier: string;
  /** How the slice was placed: a tier value (vocabulary.json). */
  tier_kind?: string;
  /** The watchdog compares this slice's use with its reservation. */
  watched?: boolean;
  /** What the share reserves, in words ("memory only; compute is shared with the GPU's other users"). */
  share_note?: string | null;
  state: SliceState;
  /**
   * Why the slice's use is not known yet, or how it is measured, in a sentence ("No GPU process
   * of this kernel seen yet: its use shows once it allocates GPU memory."); absent on older servers.
   */
  usage_note?: string | null;
  frameworks?: { [name: string]: { status: string; detail?: string } };
  /**
   * Seconds the kernel has run no cell, sent no message and used no GPU (the server's idle
   * reclaim); null for commands, other servers' kernels and slices of no memory, absent on
   * older servers.
   */
  idle_seconds?: number | null;
  /** While the server has announced that it reclaims this idle slice; null otherwise. */
  idle_notice?: IIdleNotice | null;
  /**
   * An elastic slice's use above its request, within its limit, all its GPUs together (bytes);
   * null for a fixed slice and while its use is not known, absent on older servers.
   */
  memory_burst?: number | null;
  /** While the server asks this slice's burst back for someone who needs it; null otherwise. */
  burst_notice?: IBurstNotice | null;
  /** Points taken after the `since` of the request (all of them without one). */
  history?: IHistoryPoint[];
  /**
   * The kernel's use of the host, on the slices of the kernels `GET /api/vgpu/sample` names
   * (`?host=<kernel id>`); null when its process cannot be read, absent otherwise.
   */
  host?: IHostUsage | null;
  watchdog?: {
    action: string;
    events: IWatchdogEvent[];
  };
  created: number;
}

/**
 * The server's notice that it shuts an idle kernel down to free its slice for someone who needs
 * the room (docs/rest.md, "Idle reclaim"), unless the kernel runs something or its owner keeps it.
 */
export interface IIdleNotice {
  /** When the notice was given (server time). */
  given: number;
  /** When the kernel is shut down (server time). */
  deadline: number;
  /** Seconds to the deadline when the reply was made. */
  seconds_left: number;
  /** Who needs the room, in words: "1 waiting in line (first: train.ipynb, 1/2 GPU)". */
  for: string;
}

/** What the server does to a kernel still bursting when its burst notice runs out. */
export type BurstAction = 'restart' | 'interrupt' | 'shutdown' | 'warn';

/**
 * The server's notice that it asks an elastic slice's burst back (its use above its request)
 * for someone who needs the memory (docs/rest.md, "Giving bursts back"): the idle notice's
 * fields, what happens at the deadline if the kernel still bursts, and how much it burst. Nothing
 * keeps a burst: the kernel ends the notice by using no more than its request.
 */
export interface IBurstNotice extends IIdleNotice {
  /** The admin's `burst_reclaim_action`; an unknown word is shown as sent. */
  action: BurstAction | string;
  /** Bytes above the request when the notice was given, all GPUs together. */
  burst: number;
}

/** The reply of `POST /api/vgpu/slices/<id>/keep`. */
export interface IKeepReply {
  slice_id: string;
  kept: boolean;
  /** A reclaim notice was cancelled. */
  notice_cancelled: boolean;
}

/**
 * Something the watchdog did to a slice over its reservation; or (action `idle`) the server's
 * idle reclaim shutting an idle kernel down for someone who waited; or (action `burst`) the
 * server restarting, interrupting, shutting down or warning a kernel that still burst when its
 * burst notice ran out (what it did is in `message`).
 */
export interface IWatchdogEvent {
  t: number;
  slice_id: string;
  kernel_id: string | null;
  action:
    'warn' | 'interrupt' | 'restart' | 'shutdown' | 'idle' | 'burst' | string;
  ok: boolean;
  message: string;
  path?: string | null;
  memory_used?: number | null;
  memory_reserved?: number | null;
}

/**
 * A request waiting in line for a slice; or a kernel that waits in its launcher's line
 * (`elsewhere`): its ticket is `elsewhere.id`, `position` its place in the engine's line.
 */
export interface IWaiting {
  /** A kernel that waits elsewhere: why and where, in its launcher's words; else absent or null. */
  elsewhere?: IElsewhere | null;
  ticket: number | string;
  position: number;
  owner?: string;
  uid?: number;
  holder_kind: HolderKind;
  holder: string;
  kernel_id?: string | null;
  path?: string | null;
  kernel_display_name?: string | null;
  request_text: string;
  waiting_seconds: number;
  /** The request belongs to the user this server runs as (only those can be cancelled here). */
  yours?: boolean;
  labels: { [key: string]: string };
  created?: number;
  /** While bursting kernels are asked to give back what it needs: by when, and what then happens. */
  burst_due?: IBurstDue | null;
}

/** A place in line that bursts are given back for (docs/rest.md, WAITING's `burst_due`). */
export interface IBurstDue {
  /** When the last of those bursts' notices runs out (server time, s). */
  deadline: number;
  /** Seconds to the deadline when the reply was made. */
  seconds_left: number;
  /** The admin's burst_reclaim_action at the deadline. */
  action: string;
}

export interface ISlicesReply {
  simulated: boolean;
  interval: number;
  history_step?: number;
  taken_at?: number;
  slices: ISlice[];
  waiting: IWaiting[];
  /** The launchers of this server's kernels other than `local`; absent on older servers. */
  launchers?: ILauncherInfo[];
  /** The host name of the server that holds the slices. */
  node?: string;
  /** Present when the server answers from a GPU node behind `--gateway-url`. */
  gateway?: IGateway;
  watchdog?: {
    action: string;
    tolerance?: number;
    grace?: number;
    events: IWatchdogEvent[];
  };
}

/**
 * A slice in a `GET /api/vgpu/slices?since=` reply: its `id` and `kernel_id`, the fields whose
 * value changed after `since` (all of them for a slice new since then) and its history points
 * taken after `since`.
 */
export interface ISliceChanges extends Partial<ISlice> {
  id: string;
}

/**
 * `GET /api/vgpu/slices?since=`: every live slice, each with only what changed after `since`;
 * `watchdog` only when it changed. `mergeSlices` (model.ts) makes the whole reply again from
 * the previous one.
 */
export interface ISlicesChanges extends Omit<ISlicesReply, 'slices'> {
  slices: ISliceChanges[];
}

/** Who holds memory on a GPU, as a refusal names them. */
export interface IRefusalHolder {
  /** The notebook path, or the command. */
  label: string;
  owner: string;
  reserved: number;
  yours: boolean;
}

/** A kernel start the server refused (`GET /api/vgpu/refusals/<id>`). */
export interface IRefusal {
  /** The id the refused start's reply named (`refusal_id`). */
  id: string;
  t: number;
  kernel_id: string | null;
  kernel_name: string | null;
  kernel_display_name: string | null;
  /** The notebook's path relative to the server root. */
  path: string | null;
  status: number;
  /** Why: "full" | "timed_out" | "cancelled" | "no_gpu" | "policy" | "config" | "broken". */
  reason?: string;
  /** The whole text JupyterLab shows in its "Error Starting Kernel" dialog. */
  message: string;
  /** Its first sentence. */
  summary: string;
  /** What was asked, e.g. "1/2 GPU" (null unless the GPUs were full). */
  asked: string | null;
  /** The most that fits now. */
  fits_now: { memory: number | null; text: string } | null;
  /** Earlier requests waiting in line. */
  ahead?: number;
  /** Seconds it waited in line, when it did. */
  waited?: number | null;
  gpus: {
    index: number;
    name: string;
    free: number;
    total: number;
    holders: IRefusalHolder[];
    /** Memory used outside slices. */
    foreign: number;
    /** The GPU in one line, as the message says it. */
    text?: string;
  }[];
  advice: string[];
  /** Installed sliced kernelspecs that fit now, in the server's order (largest first). */
  suggested_kernels: { name: string; display_name: string }[];
}

/** What a kernel's process tree uses of the host (psutil); null where it cannot be read. */
export interface IHostUsage {
  /** CPU time of the process tree, percent of one core (may exceed 100 on several cores). */
  cpu_percent: number | null;
  /** Resident memory of the process tree (bytes). */
  memory_rss: number | null;
  /** The host's memory (bytes). */
  memory_total: number | null;
  /** The host's CPU cores. */
  cpu_count: number | null;
}

export interface IKernelReply {
  kernel_id: string;
  slice: ISlice | null;
  /** The kernel's use of the host; absent on older servers, null when unknown. */
  host?: IHostUsage | null;
}
