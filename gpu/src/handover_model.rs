//! A model of the named-barrier hand-overs in duet's warp-specialised kernels, checked on the
//! CPU (no GPU): each warpgroup ("role") is a program of barrier arrivals / syncs and shared
//! memory reads / writes, written to mirror the kernel's loops; [`explore`] runs it under many
//! random interleavings and reports a deadlock, a role arriving twice on one barrier phase, a
//! barrier left with arrivals at the end, or two accesses to one region (one a write) that no
//! barrier orders (vector clocks).
//!
//! Barrier semantics modelled (PTX `barrier.sync` / `barrier.arrive` with a thread count, and
//! their aligned `bar.*` forms): a phase completes when `parties` roles (count / 128: every
//! role is one warpgroup) arrived or synced; the syncers wait for it; every memory access a
//! participant made before its arrival or sync is visible to the syncers after it.
//! [`Units::Warps`] runs every warp of a role on its own with the kernel's thread counts (the
//! hardware counts warps, not roles): a warp's second arrival inside one phase (PTX's "keep a
//! warp from executing more barrier instructions than intended"), a count short of the warps
//! that take part, and ops only warp 0 runs ([`Op::Lead`]: the TMA's issue) are seen there.
//! Simplifications: a role is one unit (its threads' own ordering, e.g. cp.async's wait plus the
//! warpgroup's own barrier, is the kernel's business, stated where the program says so); an
//! asynchronous copy is a write at its issue and again where it is waited for; a wgmma's
//! operand reads are reads where its group is waited for (they are over by then).
//!
//! Programs here: [`ssd_v4`], [`ssd_v5`], [`ssd_v6`] (v5's named barriers, the TMA's issue by
//! warp 0 and mbarrier waits), [`ssd_v7`] and [`ssd_v8`] (a producer warp; 416-thread SF)
//! (gpu/kernels/ssd_chunk_scan.cu), [`moe_xw`] (the
//! xw GEMM forms of gpu/kernels/moe.cu, session 34's end and session 35's). Racecheck reported
//! SSD v4's xch reads against the state's xch writes (sessions 19 / 22) and the xw forms'
//! producer x-tile stores against the epilogue tile (session 34); the model finds both
//! protocols ordered (tests below), so neither report is a missing barrier in the protocol.

use std::collections::HashMap;

/// A shared-memory region at the granularity a protocol hands over: a name and an index (a
/// stage, a slot, a tile).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Region(pub &'static str, pub u8);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Arrive(u8),
    Sync(u8),
    Read(Region),
    Write(Region),
    /// Completes the next phase of single-arrival mbarrier `id` (the TMA's stage barriers: one
    /// thread arms it, the copies land; modelled as the arming role's release).
    MbarArrive(u8),
    /// Waits for this role's next phase of mbarrier `id` (each waiter waits every phase once,
    /// by parity: a waiter two phases behind would read the wrong parity, [`Fault::Aba`]).
    MbarWait(u8),
    /// The next op is warp 0's alone (the TMA's issue, an mbarrier's arming); a no-op for a
    /// role that is one unit.
    Lead,
    /// A copy through the TMA issued: the bytes are written by the copy engine (an agent of its
    /// own, ordered after the issuer's accesses so far), seen by a unit only through a wait on
    /// the mbarrier the issuer arms next ([`Op::MbarArrive`]), not through the issuer's later
    /// barrier arrivals; the issuing role's own reads need that wait too.
    AsyncWrite(Region),
}

/// One warpgroup's program.
#[derive(Clone, Debug)]
pub struct Role {
    pub name: &'static str,
    pub ops: Vec<Op>,
}

/// Roles, and for each barrier id the number of roles that arrive or sync in every phase.
#[derive(Clone, Debug)]
pub struct Protocol {
    pub roles: Vec<Role>,
    pub parties: HashMap<u8, usize>,
    /// Warps a role (4, a warpgroup, unless set with [`Protocol::with_warps`]).
    pub warps: Vec<usize>,
    /// Barrier thread counts where they are not 128 a party ([`Protocol::with_threads`]).
    pub threads: HashMap<u8, usize>,
}

impl Protocol {
    /// Roles from (name, program) pairs.
    pub fn new(roles: Vec<(&'static str, Vec<Op>)>, parties: HashMap<u8, usize>) -> Protocol {
        let n = roles.len();
        Protocol {
            roles: roles
                .into_iter()
                .map(|(name, ops)| Role { name, ops })
                .collect(),
            parties,
            warps: vec![4; n],
            threads: HashMap::new(),
        }
    }

    /// Barrier `id` counts `threads` threads (its `bar.sync id, N`).
    pub fn with_threads(mut self, id: u8, threads: usize) -> Protocol {
        self.threads.insert(id, threads);
        self
    }

    /// Role `name` has `warps` warps.
    pub fn with_warps(mut self, name: &str, warps: usize) -> Protocol {
        for (r, role) in self.roles.iter().enumerate() {
            if role.name == name {
                self.warps[r] = warps;
            }
        }
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Deadlock(String),
    DoubleArrival(String),
    Dangling(String),
    Race(String),
    UnknownBarrier(u8),
    Aba(String),
}

struct Access {
    /// The unit (a role, or a warp under [`Units::Warps`]).
    role: usize,
    epoch: i64,
    write: bool,
    at: usize,
}

#[derive(Default)]
struct Phase {
    arrived: Vec<usize>,
    acc: Vec<i64>,
    waiters: Vec<usize>,
}

fn join(a: &mut [i64], b: &[i64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = (*x).max(*y);
    }
}

/// Who runs a protocol's programs in [`run_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Units {
    /// Each role is one unit (its warps in lockstep).
    Roles,
    /// Each warp of a role runs the role's program on its own ([`Protocol::warps`] a role;
    /// barrier counts in warps). PTX (`barrier`): a warp must not execute more barrier
    /// instructions on a barrier than intended before the barrier completes, i.e. one warp's
    /// second arrival must not land in the phase its first one did ([`Fault::DoubleArrival`]),
    /// and only the warps' arrivals that completed a phase order anything for its syncers.
    Warps,
}

/// Each barrier's count in units: its parties (roles) under [`Units::Roles`]; its thread count
/// (the kernel's `bar.sync id, N`: [`Protocol::with_threads`], else 128 a party) / 32 under
/// [`Units::Warps`].
fn unit_counts(p: &Protocol, units: Units) -> HashMap<u8, usize> {
    p.parties
        .iter()
        .map(|(&b, &parties)| {
            let n = match units {
                Units::Roles => parties,
                Units::Warps => p.threads.get(&b).copied().unwrap_or(128 * parties) / 32,
            };
            (b, n)
        })
        .collect()
}

/// One run under the interleaving drawn from `seed`, each role one unit.
pub fn run(p: &Protocol, seed: u64) -> Result<(), Fault> {
    run_with(p, seed, Units::Roles)
}

/// One run under the interleaving drawn from `seed`, with roles or warps as the units.
pub fn run_with(p: &Protocol, seed: u64, units: Units) -> Result<(), Fault> {
    // unit u: role role_of[u], warp warp_of[u] of it
    let (mut role_of, mut warp_of) = (vec![], vec![]);
    for r in 0..p.roles.len() {
        let nw = if units == Units::Warps { p.warps[r] } else { 1 };
        for w in 0..nw {
            role_of.push(r);
            warp_of.push(w);
        }
    }
    let counts = unit_counts(p, units);
    let n = role_of.len();
    // unit ag: the TMA (the copy engine), writer of every AsyncWrite; a role of its own
    let ag = n;
    role_of.push(p.roles.len());
    warp_of.push(0);
    let ops = |u: usize| &p.roles[role_of[u]].ops;
    let name = |u: usize| {
        if u == ag {
            "the TMA".to_string()
        } else if units == Units::Warps {
            format!("{} warp {}", p.roles[role_of[u]].name, warp_of[u])
        } else {
            p.roles[role_of[u]].name.to_string()
        }
    };
    let mut rng = compare::gen::Rng::new(seed);
    let mut pc = vec![0usize; n];
    let mut blocked = vec![false; n];
    // clock[i][j]: the latest epoch of unit j that unit i has seen (own epoch at [i][i]).
    let mut clock: Vec<Vec<i64>> = (0..=n)
        .map(|i| (0..=n).map(|j| if i == j { 0 } else { -1 }).collect())
        .collect();
    let mut phases: HashMap<u8, Phase> = HashMap::new();
    let mut log: HashMap<Region, Vec<Access>> = HashMap::new();
    // mbarriers: the arming unit's clock at each completed phase; phases each unit has waited
    let mut mbar_done: HashMap<u8, Vec<Vec<i64>>> = HashMap::new();
    let mut mbar_waited: HashMap<(u8, usize), usize> = HashMap::new();
    loop {
        // `Lead` then an op: only warp 0 of the role runs the op (every unit under Roles).
        for u in 0..n {
            while pc[u] < ops(u).len() && ops(u)[pc[u]] == Op::Lead {
                pc[u] += if warp_of[u] == 0 { 1 } else { 2 };
            }
        }
        let ready = |i: usize| match ops(i)[pc[i]] {
            Op::MbarWait(b) => {
                let k = mbar_waited.get(&(b, i)).copied().unwrap_or(0);
                mbar_done.get(&b).map_or(0, |d| d.len()) > k
            }
            _ => true,
        };
        let runnable: Vec<usize> = (0..n)
            .filter(|&i| !blocked[i] && pc[i] < ops(i).len() && ready(i))
            .collect();
        if runnable.is_empty() {
            if (0..n).all(|i| pc[i] >= ops(i).len()) {
                break;
            }
            let at: Vec<String> = (0..n)
                .filter(|&i| pc[i] < ops(i).len())
                .map(|i| format!("{} at op {} {:?}", name(i), pc[i], ops(i)[pc[i]]))
                .collect();
            return Err(Fault::Deadlock(at.join("; ")));
        }
        let i = runnable[rng.below(runnable.len() as u64) as usize];
        let op = ops(i)[pc[i]];
        match op {
            Op::Lead => unreachable!("skipped above"),
            Op::Arrive(b) | Op::Sync(b) => {
                let count = *counts.get(&b).ok_or(Fault::UnknownBarrier(b))?;
                let ph = phases.entry(b).or_insert_with(|| Phase {
                    acc: vec![-1; n + 1],
                    ..Default::default()
                });
                if ph.arrived.contains(&i) {
                    return Err(Fault::DoubleArrival(format!(
                        "{} arrives twice on barrier {b} (op {})",
                        name(i),
                        pc[i]
                    )));
                }
                ph.arrived.push(i);
                join(&mut ph.acc, &clock[i]);
                clock[i][i] += 1; // a new epoch after every release
                if matches!(op, Op::Sync(_)) {
                    ph.waiters.push(i);
                    blocked[i] = true;
                }
                if ph.arrived.len() == count {
                    let done = std::mem::take(ph);
                    for w in done.waiters {
                        join(&mut clock[w], &done.acc);
                        blocked[w] = false;
                    }
                    phases.insert(
                        b,
                        Phase {
                            acc: vec![-1; n + 1],
                            ..Default::default()
                        },
                    );
                }
            }
            Op::MbarArrive(b) => {
                // the arming thread's release and the copies issued so far (complete_tx)
                let mut c = clock[i].clone();
                join(&mut c, &clock[ag]);
                mbar_done.entry(b).or_default().push(c);
                clock[i][i] += 1;
            }
            Op::MbarWait(b) => {
                let k = mbar_waited.entry((b, i)).or_insert(0);
                let done = &mbar_done[&b];
                if done.len() > *k + 1 {
                    return Err(Fault::Aba(format!(
                        "{} waits phase {k} of mbarrier {b} (op {}) after phase {} completed",
                        name(i),
                        pc[i],
                        *k + 1
                    )));
                }
                join(&mut clock[i], &done[*k]);
                *k += 1;
            }
            Op::Read(r) | Op::Write(r) | Op::AsyncWrite(r) => {
                let write = !matches!(op, Op::Read(_));
                // the accessing unit: the TMA for an AsyncWrite (issued by unit i)
                let u = if let Op::AsyncWrite(_) = op {
                    let ci = clock[i].clone();
                    join(&mut clock[ag], &ci);
                    clock[ag][ag] += 1;
                    ag
                } else {
                    i
                };
                let list = log.entry(r).or_default();
                // Units of one role do not race with each other: their own ordering (the
                // warpgroup's barriers, wgmma) is the kernel's business.
                for a in list.iter() {
                    if role_of[a.role] != role_of[u]
                        && (write || a.write)
                        && a.epoch > clock[u][a.role]
                    {
                        return Err(Fault::Race(format!(
                            "{:?}: {} {} (op {} of {}) unordered with {} {} (op {})",
                            r,
                            name(u),
                            if write { "write" } else { "read" },
                            pc[i],
                            name(i),
                            name(a.role),
                            if a.write { "write" } else { "read" },
                            a.at
                        )));
                    }
                }
                list.push(Access {
                    role: u,
                    epoch: clock[u][u],
                    write,
                    at: pc[i],
                });
            }
        }
        pc[i] += 1;
    }
    for (b, ph) in &phases {
        if !ph.arrived.is_empty() {
            let who: Vec<String> = ph.arrived.iter().map(|&i| name(i)).collect();
            return Err(Fault::Dangling(format!(
                "barrier {b} ends with arrivals from {who:?}"
            )));
        }
    }
    Ok(())
}

/// `runs` interleavings (seeds 0..runs) with each role one unit; the first fault, with its
/// seed.
pub fn explore(p: &Protocol, runs: u64) -> Result<(), (u64, Fault)> {
    explore_with(p, runs, Units::Roles)
}

/// `runs` interleavings (seeds 0..runs) with roles or warps as the units.
pub fn explore_with(p: &Protocol, runs: u64, units: Units) -> Result<(), (u64, Fault)> {
    for s in 0..runs {
        run_with(p, s, units).map_err(|f| (s, f))?;
    }
    Ok(())
}

/// SSD v4 (`ssd4_fused_p64_n128`, `ssd4_row_loop` / `ssd4_state`) over `nc` chunks: barrier 0
/// (all three warpgroups) a chunk after the copies' wait; the state writes xch half lh, arrives
/// on 1 + lh; row warpgroup R syncs on 1 + R, reads its half, arrives on 3 + R (not after the
/// last chunk); the state syncs on 3 + lh before writing the half again. Row warpgroup 0 issues
/// chunk c + 1's copies during its M · x; everyone waits for their copies before barrier 0.
pub fn ssd_v4(nc: usize) -> Protocol {
    use Op::*;
    let st = |c: usize| Region("stage", (c & 1) as u8);
    let (xch, dvec) = (|h: usize| Region("xch", h as u8), Region("dvec", 0));
    let mut rows = [vec![], vec![]];
    let mut state = vec![];
    // The prologue: all 384 threads copy disjoint parts of chunk 0 and each waits for its own
    // before barrier 0; one write stands for them (the regions here are whole stages).
    if nc > 0 {
        rows[0].push(Write(st(0)));
    }
    rows[0].push(Write(dvec));
    for c in 0..nc {
        // cp.async.wait_group 0 (row warpgroup 0's copies of chunk c complete), barrier 0.
        if c > 0 {
            rows[0].push(Write(st(c)));
        }
        for ops in rows.iter_mut().chain(std::iter::once(&mut state)) {
            ops.push(Sync(0));
        }
        for (r, ops) in rows.iter_mut().enumerate() {
            ops.push(Read(st(c))); // G, M · x (wgmma, waited)
            if r == 0 && c + 1 < nc {
                ops.push(Write(st(c + 1))); // the next chunk's copies, issued
            }
            ops.push(Sync(1 + r as u8));
            ops.push(Read(xch(r)));
            ops.push(Read(st(c))); // x for D x
            ops.push(Read(dvec));
            if c + 1 < nc {
                ops.push(Arrive(3 + r as u8));
            }
        }
        for lh in 0..2u8 {
            if c > 0 {
                state.push(Sync(3 + lh));
            }
            state_half(&mut state, st(c), xch(lh as usize), 1 + lh);
        }
        state.push(Read(st(c))); // x, B (the update)
    }
    let [r0, r1] = rows;
    ssd_roles(r0, r1, state, [(0, 3), (1, 2), (2, 2), (3, 2), (4, 2)])
}

/// Row warpgroup 0's own barrier in v5-v7 (`SSD5_WG0`, 128 threads).
const WG0: u8 = 10;

/// A row warpgroup's epilogue of X half `k`: its slot once XFULL, the stage's x, D.
fn row_epilogue(ops: &mut Vec<Op>, xfull: u8, xch: Region, st: Region, dvec: Region) {
    ops.extend([Op::Sync(xfull), Op::Read(xch), Op::Read(st), Op::Read(dvec)]);
}

/// Warp 0's TMA issue of a stage: the copies, then lane 0 arms the stage's mbarrier.
fn tma_issue(st: Region, full: u8) -> [Op; 4] {
    [Op::Lead, Op::AsyncWrite(st), Op::Lead, Op::MbarArrive(full)]
}

/// The state's X half: C from the stage, X into the half's slot, released by XFULL.
fn state_half(ops: &mut Vec<Op>, st: Region, xch: Region, xfull: u8) {
    ops.extend([Op::Read(st), Op::Write(xch), Op::Arrive(xfull)]);
}

/// The state's chunk in v7 / v8: the stage's mbarrier, X half 0, W0D of the previous chunk
/// (none at chunk 0), X half 1, the update, SF (none for the last two chunks).
fn state_chunk_dec(
    ops: &mut Vec<Op>,
    full: u8,
    st: Region,
    halves: [(Region, u8); 2],
    w0d: Option<u8>,
    sf: Option<u8>,
) {
    ops.push(Op::MbarWait(full));
    for (lh, (xch, xfull)) in halves.into_iter().enumerate() {
        if let (1, Some(b)) = (lh, w0d) {
            ops.push(Op::Sync(b));
        }
        state_half(ops, st, xch, xfull);
    }
    ops.push(Op::Read(st)); // x, B (the update)
    if let Some(b) = sf {
        ops.push(Op::Arrive(b));
    }
}

/// The fused SSD kernels' three roles (row warpgroups 0 and 1, the state warpgroup) with the
/// parties of each barrier id.
fn ssd_roles(
    r0: Vec<Op>,
    r1: Vec<Op>,
    state: Vec<Op>,
    parties: impl IntoIterator<Item = (u8, usize)>,
) -> Protocol {
    Protocol::new(
        vec![("rows0", r0), ("rows1", r1), ("state", state)],
        parties.into_iter().collect(),
    )
}

/// The ways [`ssd_v5_with`] can be broken on purpose (the checker must see each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V5Fault {
    None,
    /// No SF: row warpgroup 0 loads a stage without waiting for the others to be done with it.
    NoSf,
    /// X in two half slots (v4's halves) instead of three.
    TwoSlots,
    /// Row warpgroup 1 arrives on SF after every chunk, also where no load follows.
    ExtraArrival,
}

/// SSD v5 (`ssd5_fused_p64_n128`, `ssd5_row_loop`, `ssd4_state_t<true>`) over `nc` chunks.
pub fn ssd_v5(nc: usize) -> Protocol {
    ssd_v5_with(nc, V5Fault::None)
}

/// [`ssd_v5`], optionally broken.
pub fn ssd_v5_with(nc: usize, fault: V5Fault) -> Protocol {
    use Op::*;
    // Ids as in the kernel: LR 1-2, LS 3-4, SF 5-6, XFULL 7-9 (barrier 10 is row warpgroup
    // 0's own, not a hand-over).
    let (lr, ls, sf) = (
        |p: usize| 1 + p as u8,
        |p: usize| 3 + p as u8,
        |p: usize| 5 + p as u8,
    );
    let slots = if fault == V5Fault::TwoSlots { 2 } else { 3 };
    let slot = |k: usize| (k % slots) as u8;
    let xfull = |k: usize| 7 + slot(k);
    let st = |c: usize| Region("stage", (c & 1) as u8);
    let xch = |k: usize| Region("xch", slot(k));
    let dvec = Region("dvec", 0);
    let mut r0 = vec![Write(dvec)];
    let mut r1 = vec![];
    let mut state = vec![];
    if nc > 0 {
        // Row warpgroup 0 copies chunk 0, waits for it (and its own barrier 10), releases it.
        r0.extend([
            Write(st(0)),
            Write(st(0)),
            Sync(WG0),
            Arrive(lr(0)),
            Arrive(ls(0)),
        ]);
    }
    for c in 0..nc {
        let p = c & 1;
        for (r, ops) in [&mut r0, &mut r1].into_iter().enumerate() {
            if r == 1 {
                ops.push(Sync(lr(p)));
            }
            ops.push(Read(st(c))); // G, M · x
            if r == 0 && c + 1 < nc {
                if c + 1 >= 2 && fault != V5Fault::NoSf {
                    ops.push(Sync(sf(p ^ 1)));
                }
                ops.push(Write(st(c + 1))); // copies issued during M · x
            }
            let k = 2 * c + r;
            row_epilogue(ops, xfull(k), xch(k), st(c), dvec);
            if r == 1 {
                if (c + 2 < nc && fault != V5Fault::NoSf) || fault == V5Fault::ExtraArrival {
                    ops.push(Arrive(sf(p)));
                }
            } else if c + 1 < nc {
                // wait_group 0 on chunk c + 1's copies, proxy fence, barrier 10, release.
                ops.extend([
                    Write(st(c + 1)),
                    Sync(WG0),
                    Arrive(lr(p ^ 1)),
                    Arrive(ls(p ^ 1)),
                ]);
            }
        }
        state.push(Sync(ls(p)));
        for lh in 0..2 {
            let k = 2 * c + lh;
            state_half(&mut state, st(c), xch(k), xfull(k));
        }
        state.push(Read(st(c))); // x, B (the update)
        if c + 2 < nc && fault != V5Fault::NoSf {
            state.push(Arrive(sf(p)));
        }
    }
    let parties = (0..2)
        .flat_map(|p| [(lr(p), 2), (ls(p), 2), (sf(p), 3)])
        .chain((0..3).map(|k| (xfull(k), 2)))
        .chain([(WG0, 1)]);
    ssd_roles(r0, r1, state, parties)
}

/// SSD v6 (`ssd6_fused_p64_n128`: `ssd5_body<true>`, v5's named barriers with the stage loads
/// through the TMA) over `nc` chunks: warp 0 of row warpgroup 0 issues a stage's copies and lane 0
/// arms its mbarrier (full[c % 2]); row warpgroup 0 waits on it before releasing the stage (LR /
/// LS), row warpgroup 1 and the state wait on it after their LR / LS.
pub fn ssd_v6(nc: usize) -> Protocol {
    use Op::*;
    let (lr, ls, sf) = (
        |p: usize| 1 + p as u8,
        |p: usize| 3 + p as u8,
        |p: usize| 5 + p as u8,
    );
    let slot = |k: usize| (k % 3) as u8;
    let xfull = |k: usize| 7 + slot(k);
    let full = |c: usize| 20 + (c & 1) as u8;
    let st = |c: usize| Region("stage", (c & 1) as u8);
    let xch = |k: usize| Region("xch", slot(k));
    let dvec = Region("dvec", 0);
    let issue = |c: usize| tma_issue(st(c), full(c));
    let mut r0 = vec![Write(dvec), Sync(WG0)];
    let mut r1 = vec![];
    let mut state = vec![];
    if nc > 0 {
        r0.extend(issue(0));
        r0.extend([MbarWait(full(0)), Arrive(lr(0)), Arrive(ls(0))]);
    }
    for c in 0..nc {
        let p = c & 1;
        for (r, ops) in [&mut r0, &mut r1].into_iter().enumerate() {
            if r == 1 {
                ops.extend([Sync(lr(p)), MbarWait(full(c))]);
            }
            ops.push(Read(st(c))); // G, M · x
            if r == 0 && c + 1 < nc {
                if c + 1 >= 2 {
                    ops.push(Sync(sf(p ^ 1)));
                }
                ops.extend(issue(c + 1)); // during M · x
            }
            let k = 2 * c + r;
            row_epilogue(ops, xfull(k), xch(k), st(c), dvec);
            if r == 1 {
                if c + 2 < nc {
                    ops.push(Arrive(sf(p)));
                }
            } else if c + 1 < nc {
                ops.extend([MbarWait(full(c + 1)), Arrive(lr(p ^ 1)), Arrive(ls(p ^ 1))]);
            }
        }
        state.extend([Sync(ls(p)), MbarWait(full(c))]);
        for lh in 0..2 {
            let k = 2 * c + lh;
            state_half(&mut state, st(c), xch(k), xfull(k));
        }
        state.push(Read(st(c))); // x, B (the update)
        if c + 2 < nc {
            state.push(Arrive(sf(p)));
        }
    }
    let parties = (0..2)
        .flat_map(|p| [(lr(p), 2), (ls(p), 2), (sf(p), 3)])
        .chain((0..3).map(|k| (xfull(k), 2)))
        .chain([(WG0, 1)]);
    ssd_roles(r0, r1, state, parties)
}

/// The ways [`ssd_v7_with`] can be broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V7Fault {
    None,
    /// The state writes X's second half without waiting for row warpgroup 0's W0D.
    NoW0d,
    /// One W0D id for every chunk instead of one a chunk parity.
    OneW0d,
    /// Row warpgroup 1 does not wait on the stage's mbarrier (only chunk 0's LR).
    NoFullWait,
    /// XFULL by slot (v5's three ids): without LR a chunk, row warpgroup 1 can sync half
    /// k + 3's id before row warpgroup 0 synced half k's and take its phase.
    ThreeXfull,
}

/// SSD v7 (`ssd7_fused_p64_n128`: v6's TMA loads, the roles decoupled further) over `nc`
/// chunks. Ids: LR 1 (chunk 0 only: stage 0 and D, for row warpgroup 1), W0D 3-4 (row
/// warpgroup 0 is done with its chunk-c half slot: the state may write chunk c + 1's second
/// half there), SF 5-6 as v5, XFULL by half k % 6 (7, 8, 9, 11, 12, 13; 10 is row warpgroup 0's
/// own barrier): halves k and k + 3 share a slot but not a barrier, halves k and k + 6 have one
/// reader; mbarriers 20-21 (full[p]: stage p loaded). Row
/// warpgroups and the state wait on the stage's mbarrier themselves (no LR / LS a chunk), so the
/// state can compute chunk c + 1's first half while row warpgroup 0 still finishes chunk c.
pub fn ssd_v7(nc: usize) -> Protocol {
    ssd_v7_with(nc, V7Fault::None)
}

/// [`ssd_v7`], optionally broken.
pub fn ssd_v7_with(nc: usize, fault: V7Fault) -> Protocol {
    ssd_decoupled(nc, fault, false)
}

/// v7 ([`ssd_v7_with`]) and, with `producer`, v8 ([`ssd_v8`]): the same W0D / XFULL / mbarrier
/// protocol; v8's producer warp issues the stage loads after SF, which row warpgroup 0 then
/// arrives on too, and row warpgroup 0 waits on every stage's mbarrier.
fn ssd_decoupled(nc: usize, fault: V7Fault, producer: bool) -> Protocol {
    use Op::*;
    let w0d = |c: usize| {
        if fault == V7Fault::OneW0d {
            3
        } else {
            3 + (c & 1) as u8
        }
    };
    let sf = |p: usize| 5 + p as u8;
    let slot = |k: usize| (k % 3) as u8;
    let xfull = |k: usize| {
        if fault == V7Fault::ThreeXfull {
            7 + slot(k)
        } else {
            [7, 8, 9, 11, 12, 13][k % 6]
        }
    };
    let full = |c: usize| 20 + (c & 1) as u8;
    let st = |c: usize| Region("stage", (c & 1) as u8);
    let xch = |k: usize| Region("xch", slot(k));
    let dvec = Region("dvec", 0);
    let mut prod = vec![];
    if producer {
        for c in 0..nc {
            if c >= 2 {
                prod.push(Sync(sf(c & 1)));
            }
            prod.extend([AsyncWrite(st(c)), MbarArrive(full(c))]);
        }
    }
    // Thread 0 initialises the mbarriers before the roles split (a block barrier: not a
    // hand-over of data, so not modelled). Barrier 10: dvec written.
    let mut r0 = vec![Write(dvec), Sync(WG0)];
    let mut r1 = vec![];
    let mut state = vec![];
    if nc > 0 {
        if !producer {
            // warp 0 issues chunk 0 (the TMA's writes, then lane 0 arms full[0]), every warp
            // waits for it
            r0.extend(tma_issue(st(0), full(0)));
            r0.push(MbarWait(full(0)));
        }
        r0.push(Arrive(1)); // LR: D (v7: and stage 0) for row warpgroup 1
    }
    for c in 0..nc {
        let p = c & 1;
        for (r, ops) in [&mut r0, &mut r1].into_iter().enumerate() {
            if r == 1 {
                if c == 0 {
                    ops.push(Sync(1));
                }
                if c == 0 || fault != V7Fault::NoFullWait {
                    ops.push(MbarWait(full(c)));
                }
            } else if c > 0 || producer {
                ops.push(MbarWait(full(c)));
            }
            ops.push(Read(st(c))); // G, M · x
            if r == 0 && c + 1 < nc && !producer {
                if c + 1 >= 2 {
                    ops.push(Sync(sf(p ^ 1)));
                }
                ops.extend(tma_issue(st(c + 1), full(c + 1)));
            }
            let k = 2 * c + r;
            row_epilogue(ops, xfull(k), xch(k), st(c), dvec);
            if r == 0 && c + 1 < nc {
                ops.push(Arrive(w0d(c)));
            }
            if (r == 1 || producer) && c + 2 < nc {
                ops.push(Arrive(sf(p)));
            }
        }
        state_chunk_dec(
            &mut state,
            full(c),
            st(c),
            [
                (xch(2 * c), xfull(2 * c)),
                (xch(2 * c + 1), xfull(2 * c + 1)),
            ],
            (c >= 1 && fault != V7Fault::NoW0d).then(|| w0d(c - 1)),
            (c + 2 < nc).then(|| sf(p)),
        );
    }
    // LR once, W0D 3-4, SF (v8: the producer too), XFULL by half k % 6
    let sf_parties = if producer { 4 } else { 3 };
    let parties = [(1, 2), (WG0, 1)]
        .into_iter()
        .chain((0..2).flat_map(|p| [(3 + p as u8, 2), (sf(p), sf_parties)]))
        .chain((0..6).map(|k| (xfull(k), 2)));
    if !producer {
        return ssd_roles(r0, r1, state, parties);
    }
    Protocol::new(
        vec![
            ("rows0", r0),
            ("rows1", r1),
            ("state", state),
            ("producer", prod),
        ],
        parties.collect(),
    )
    .with_warps("producer", 1)
    .with_threads(sf(0), 416)
    .with_threads(sf(1), 416)
}

/// SSD v8 (`ssd8_fused_p64_n128`: v7 with a producer warp, `ssd5_body<true, true, true>`) over
/// `nc` chunks: the producer (one warp of a fourth warpgroup) loads chunk c into stage c % 2
/// after SF (c >= 2), which the three roles arrive on once done with chunk c - 2 there (416
/// threads: 3 x 128 arrive, 32 sync); row warpgroup 0 issues nothing and waits on the stage's
/// mbarrier every chunk; otherwise v7's W0D / XFULL.
pub fn ssd_v8(nc: usize) -> Protocol {
    ssd_decoupled(nc, V7Fault::None, true)
}

/// Which end of the xw forms' main loop [`moe_xw`] models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XwEnd {
    /// Session 34 (efae168d): the producers exit after their last FULL arrival; the two consumer
    /// warpgroups sync on EPIB (256) and write / read the epilogue tile.
    Session34,
    /// Session 35: all 512 threads sync on FIN after the main loop, then as `Session34`.
    Fin,
    /// Session 35's e forms: FIN, the consumers write the tile, all 512 sync on EPIB, everyone
    /// stores (reads the tile).
    FinShared,
    /// Broken on purpose: no barrier between the main loop and the tile (neither EPIB first nor
    /// FIN): one consumer warpgroup's tile stores can overwrite x tiles the other still reads.
    NoBarrier,
}

/// The xw GEMM forms (gpu/kernels/moe.cu `moe_xw_body`) over `nsi` 128-k steps with `p` ring
/// stages and `xs` x tiles: one producer role (both producer warpgroups: they order their raw x
/// stages among themselves by barrier PROD) copies raw x stage s (cp.async, a write at its issue
/// and at its wait), decodes it into x tile s % xs after EMPTY (s >= xs) and arrives on FULL; each
/// consumer warpgroup copies its weight stages (its own bytes), syncs on FULL, runs the wgmma
/// groups (reads of the tile where their group is known complete), and arrives on EMPTY of step
/// s - 1's tile once it is complete (only for tiles refilled). The epilogue's f32 tile overlays
/// the whole shared memory (x tiles, raw x stages, weight rings): a write of every region.
pub fn moe_xw(nsi: usize, p: usize, xs: usize, end: XwEnd) -> Protocol {
    use Op::*;
    // Barrier ids as in the kernel: FULL 1 + b, EMPTY 1 + xs + b, EPIB 2 + 2 xs, FIN 3 + 2 xs.
    let full = |b: usize| (1 + b) as u8;
    let empty = |b: usize| (1 + xs + b) as u8;
    let (prod_bar, epib, fin) = ((1 + 2 * xs) as u8, (2 + 2 * xs) as u8, (3 + 2 * xs) as u8);
    // Every region in two parts: the bytes under consumer warpgroup 0's columns of the f32 tile
    // and those under warpgroup 1's (the tile's rows interleave both over all of shared memory).
    let part = |name: &'static str, i: usize, c: usize| Region(name, (2 * i + c) as u8);
    let whole = |name: &'static str, i: usize| [part(name, i, 0), part(name, i, 1)];
    let mut all: Vec<(&'static str, usize)> = (0..xs).map(|b| ("xtile", b)).collect();
    for sl in 0..p {
        all.extend([("xraw", sl), ("wring0", sl), ("wring1", sl)]);
    }
    let ring = |c: usize| if c == 0 { "wring0" } else { "wring1" };
    let w = |ops: &mut Vec<Op>, name, i| ops.extend(whole(name, i).map(Write));
    let r = |ops: &mut Vec<Op>, name, i| ops.extend(whole(name, i).map(Read));
    let mut prod = vec![];
    for s in 0..(p - 1).min(nsi) {
        w(&mut prod, "xraw", s);
    }
    for s in 0..nsi {
        let sl = s % p;
        w(&mut prod, "xraw", sl); // stage s's copies complete (wait_group P - 2)
        prod.push(Sync(prod_bar)); // PROD: every producer thread's part of stage s landed
        if s + p - 1 < nsi {
            w(&mut prod, "xraw", (s + p - 1) % p); // issued into stage s - 1's slot
        }
        let b = s % xs;
        if s >= xs {
            prod.push(Sync(empty(b)));
        }
        r(&mut prod, "xraw", sl);
        w(&mut prod, "xtile", b);
        prod.push(Arrive(full(b)));
    }
    let mut cons = [vec![], vec![]];
    for (c, ops) in cons.iter_mut().enumerate() {
        for s in 0..(p - 1).min(nsi) {
            w(ops, ring(c), s);
        }
        for s in 0..nsi {
            if s + p - 1 < nsi {
                w(ops, ring(c), (s + p - 1) % p);
            }
            w(ops, ring(c), s % p); // wait_group P - 1: stage s complete
            r(ops, ring(c), s % p);
            ops.push(Sync(full(s % xs)));
            if s >= 1 {
                // gi == 1: step s - 1's groups are complete (their reads of its tile are over)
                r(ops, "xtile", (s - 1) % xs);
                if s - 1 + xs < nsi {
                    ops.push(Arrive(empty((s - 1) % xs)));
                }
            }
            r(ops, "xtile", s % xs); // this step's groups (issued)
        }
        if nsi > 0 {
            r(ops, "xtile", (nsi - 1) % xs); // wgmma.wait_group 0
        }
        if matches!(end, XwEnd::Fin | XwEnd::FinShared) {
            ops.push(Sync(fin));
        }
        if end == XwEnd::Session34 {
            ops.push(Sync(epib));
        }
        // This warpgroup's columns of the f32 tile, then EPIB (the consumers' own barrier in
        // moe_x_epilogue; all 512 threads in the e forms) and the stores, which read all of it.
        ops.extend(all.iter().map(|&(n, i)| Write(part(n, i, c))));
        ops.push(Sync(epib));
        for &(n, i) in &all {
            r(ops, n, i);
        }
    }
    if matches!(end, XwEnd::Fin | XwEnd::FinShared) {
        prod.push(Sync(fin));
    }
    if end == XwEnd::FinShared {
        prod.push(Sync(epib));
        for &(n, i) in &all {
            r(&mut prod, n, i);
        }
    }
    let [c0, c1] = cons;
    let mut parties = HashMap::new();
    for b in 0..xs {
        parties.insert(full(b), 3);
        parties.insert(empty(b), 3);
    }
    parties.insert(fin, 3);
    parties.insert(epib, if end == XwEnd::FinShared { 3 } else { 2 });
    parties.insert(prod_bar, 1);
    let proto = Protocol::new(
        vec![("producers", prod), ("consumers0", c0), ("consumers1", c1)],
        parties,
    )
    .with_warps("producers", 8);
    // The kernel's counts: FULL, EMPTY, FIN 512; PROD 256; EPIB 256 (the consumers) or 512.
    let mut proto = proto;
    for b in 0..xs {
        proto = proto.with_threads(full(b), 512).with_threads(empty(b), 512);
    }
    let epib_threads = if end == XwEnd::FinShared { 512 } else { 256 };
    proto
        .with_threads(fin, 512)
        .with_threads(prod_bar, 256)
        .with_threads(epib, epib_threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNS: u64 = 1500;

    /// `protocol(nc)` is ordered and deadlock-free for 0..=8 chunks, with each role one unit
    /// and with each warp its own.
    fn ordered_for_0_to_8_chunks(name: &str, protocol: fn(usize) -> Protocol) {
        for nc in 0..=8 {
            for units in [Units::Roles, Units::Warps] {
                if let Err((seed, f)) = explore_with(&protocol(nc), RUNS, units) {
                    panic!("{name}, {nc} chunks, {units:?}, seed {seed}: {f:?}");
                }
            }
        }
    }

    #[test]
    fn ssd_v5_protocol_is_ordered_and_deadlock_free() {
        ordered_for_0_to_8_chunks("v5", ssd_v5);
    }

    #[test]
    fn ssd_v6_protocol_is_ordered_and_deadlock_free() {
        ordered_for_0_to_8_chunks("v6", ssd_v6);
    }

    #[test]
    fn a_missing_wait_on_the_tma_is_caught() {
        // Row warpgroup 0 (v6: releasing a stage through LR / LS; v7: reading it) without
        // waiting on the stage's mbarrier: the TMA's writes are not ordered before the reads
        // (the issuer's own arrivals do not carry the copy engine's writes).
        for mut p in [ssd_v6(4), ssd_v7(4)] {
            p.roles[0].ops.retain(|op| !matches!(op, Op::MbarWait(_)));
            races_role_and_warp_wise(&p);
        }
    }

    /// `p` races, with each role one unit and with each warp its own.
    fn races_role_and_warp_wise(p: &Protocol) {
        for units in [Units::Roles, Units::Warps] {
            let e = explore_with(p, RUNS, units).unwrap_err();
            assert!(matches!(e.1, Fault::Race(_)), "{units:?}: {e:?}");
        }
    }

    #[test]
    fn ssd_v8_protocol_is_ordered_and_deadlock_free() {
        ordered_for_0_to_8_chunks("v8", ssd_v8);
    }

    #[test]
    fn broken_v8_protocols_are_caught() {
        // SF counted as v7's 384 threads: the three roles' arrivals complete a phase without
        // the producer warp, whose sync then takes the next phase's.
        let short = ssd_v8(6).with_threads(5, 384).with_threads(6, 384);
        let e = explore_with(&short, RUNS, Units::Warps).unwrap_err();
        assert!(
            matches!(
                e.1,
                Fault::Race(_) | Fault::Deadlock(_) | Fault::Dangling(_) | Fault::DoubleArrival(_)
            ),
            "{e:?}"
        );
        // Row warpgroup 0 not arriving on SF: the producer may reload a stage it still reads
        // (with SF's count lowered to match, else it deadlocks).
        let mut p = ssd_v8(6).with_threads(5, 288).with_threads(6, 288);
        p.parties.insert(5, 3);
        p.parties.insert(6, 3);
        p.roles[0]
            .ops
            .retain(|op| !matches!(op, Op::Arrive(5) | Op::Arrive(6)));
        races_role_and_warp_wise(&p);
    }

    #[test]
    fn ssd_v7_protocol_is_ordered_and_deadlock_free() {
        ordered_for_0_to_8_chunks("v7", ssd_v7);
    }

    #[test]
    fn broken_v7_protocols_are_caught() {
        // Without W0D the state's second half of chunk c + 1 overwrites the slot row warpgroup 0
        // may still read for chunk c; without its mbarrier wait row warpgroup 1 reads a stage
        // the TMA may still write.
        for f in [V7Fault::NoW0d, V7Fault::NoFullWait] {
            let e = explore(&ssd_v7_with(6, f), RUNS).unwrap_err();
            assert!(matches!(e.1, Fault::Race(_)), "{f:?}: {e:?}");
        }
        // One W0D id: row warpgroup 0 can arrive for chunk c + 1 before the state synced c;
        // v5's three XFULL ids: row warpgroup 1's sync for half k + 3 can take half k's phase.
        for f in [V7Fault::OneW0d, V7Fault::ThreeXfull] {
            let e = explore(&ssd_v7_with(8, f), RUNS).unwrap_err();
            assert!(
                matches!(
                    e.1,
                    Fault::DoubleArrival(_) | Fault::Race(_) | Fault::Deadlock(_)
                ),
                "{f:?}: {e:?}"
            );
        }
    }

    #[test]
    fn a_barrier_count_short_of_its_warps_is_caught() {
        // SF (ids 5, 6) counted as 256 threads where 384 take part: under warps, a phase
        // completes with 8 of the 12 warps, so row warpgroup 0 can reload a stage the others
        // still read (the role model, in whole roles, cannot see a thread count).
        let short = || ssd_v5(6).with_threads(5, 256).with_threads(6, 256);
        assert_eq!(explore(&short(), RUNS), Ok(()));
        let e = explore_with(&short(), RUNS, Units::Warps).unwrap_err();
        assert!(
            matches!(
                e.1,
                Fault::Race(_) | Fault::DoubleArrival(_) | Fault::Dangling(_)
            ),
            "{e:?}"
        );
        // Warp 0 alone arms the stage's mbarrier: if every warp of row warpgroup 0 armed it, a
        // reader could pass a phase whose copies were not issued yet.
        let mut every = ssd_v7(4);
        every.roles[0].ops.retain(|op| *op != Op::Lead);
        let e = explore_with(&every, RUNS, Units::Warps).unwrap_err();
        assert!(matches!(e.1, Fault::Race(_) | Fault::Aba(_)), "{e:?}");
    }

    #[test]
    fn the_checker_sees_an_mbarrier_aba() {
        use Op::*;
        // a waiter two phases behind (parity waits cannot tell phase k from k + 2)
        let p = Protocol::new(
            vec![
                ("a", vec![MbarArrive(20), MbarArrive(20), MbarArrive(20)]),
                ("b", vec![MbarWait(20)]),
            ],
            HashMap::new(),
        );
        assert!(matches!(explore(&p, 200), Err((_, Fault::Aba(_)))));
    }

    #[test]
    fn ssd_v4_protocol_is_ordered_and_deadlock_free() {
        // Racecheck's v4 report (sessions 19 / 22) is not a missing barrier in this protocol.
        ordered_for_0_to_8_chunks("v4", ssd_v4);
    }

    #[test]
    fn broken_v5_protocols_are_caught() {
        // Without SF a stage is reloaded while row warpgroup 1 or the state may still read it;
        // with two slots the state's X of chunk c + 1 may overwrite the half row warpgroup 1
        // still reads.
        for f in [V5Fault::NoSf, V5Fault::TwoSlots] {
            let e = explore(&ssd_v5_with(6, f), RUNS).unwrap_err();
            assert!(matches!(e.1, Fault::Race(_)), "{f:?}: {e:?}");
        }
        // An arrival no one consumes stays on the barrier (and would end a later phase early).
        let e = explore(&ssd_v5_with(3, V5Fault::ExtraArrival), RUNS).unwrap_err();
        assert!(
            matches!(e.1, Fault::Dangling(_) | Fault::DoubleArrival(_)),
            "{e:?}"
        );
    }

    #[test]
    fn the_checker_sees_an_unordered_write_and_a_deadlock() {
        use Op::*;
        let d = Region("d", 0);
        let two = |a: Vec<Op>, b: Vec<Op>, ids: &[u8]| {
            Protocol::new(
                vec![("a", a), ("b", b)],
                ids.iter().map(|&i| (i, 2)).collect(),
            )
        };
        let race = two(vec![Write(d), Arrive(1)], vec![Read(d), Sync(1)], &[1]);
        assert!(matches!(explore(&race, 50), Err((_, Fault::Race(_)))));
        let ordered = two(vec![Write(d), Arrive(1)], vec![Sync(1), Read(d)], &[1]);
        assert_eq!(explore(&ordered, 50), Ok(()));
        let dead = two(vec![Sync(1), Arrive(2)], vec![Sync(2), Arrive(1)], &[1, 2]);
        assert!(matches!(explore(&dead, 5), Err((_, Fault::Deadlock(_)))));
    }

    #[test]
    fn moe_xw_protocols_are_ordered() {
        // xw192 (P 4, XS 2), xw192t3 (P 3, XS 3), xw128 (P 4, XS 3), K / 128 = 1 .. 9 steps.
        for (p, xs) in [(4, 2), (3, 3), (4, 3)] {
            for nsi in 1..=9 {
                for end in [XwEnd::Session34, XwEnd::Fin, XwEnd::FinShared] {
                    for units in [Units::Roles, Units::Warps] {
                        if let Err((seed, f)) = explore_with(&moe_xw(nsi, p, xs, end), RUNS, units)
                        {
                            panic!(
                                "xw P {p} XS {xs}, {nsi} steps, {end:?}, {units:?}, seed {seed}: {f:?}"
                            );
                        }
                    }
                }
            }
        }
        // Without a barrier between the main loop and the tile, a consumer warpgroup's tile
        // stores race with the other's last reads of the x tiles.
        let e = explore(&moe_xw(4, 4, 2, XwEnd::NoBarrier), RUNS).unwrap_err();
        assert!(matches!(e.1, Fault::Race(_)), "{e:?}");
    }
}
