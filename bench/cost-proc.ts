/**
 * CPU of a SQL server running on this machine, read from /proc for
 * the cost workload (cost-meter.ts): the whole server (a process, or the
 * PostgreSQL postmaster with its children), and the part of it that served
 * this process's own connections (MariaDB: the threads of its sessions;
 * PostgreSQL: the backends at the other end of its sockets), which other
 * clients of a shared server do not reach. CPU is in µs, counted by the
 * kernel in clock ticks of 10 ms.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

const CLOCK_TICKS_PER_S = 100; // USER_HZ on Linux

const ticksToUs = (ticks: number): number => (ticks * 1e6) / CLOCK_TICKS_PER_S;

export function isLocalHost(hostname: string): boolean {
  return ['127.0.0.1', 'localhost', '::1', '[::1]'].includes(hostname);
}

function numericDirs(path: string): string[] {
  try {
    return readdirSync(path).filter((e) => /^\d+$/.test(e));
  } catch {
    return [];
  }
}

/** The socket inodes a process holds open ("socket:[123]" links in its fd directory). */
function socketLinks(pid: number | 'self'): Set<string> {
  const links = new Set<string>();
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return links;
  }
  for (const fd of fds) {
    try {
      const link = readlinkSync(`/proc/${pid}/fd/${fd}`);
      if (link.startsWith('socket:[')) links.add(link);
    } catch {
      // closed meanwhile
    }
  }
  return links;
}

interface TcpSocket {
  localPort: number;
  remotePort: number;
  listening: boolean;
  /** As the fd links name it: "socket:[inode]". */
  link: string;
}

function tcpSockets(): TcpSocket[] {
  const out: TcpSocket[] = [];
  const port = (address: string): number => Number.parseInt(address.slice(address.lastIndexOf(':') + 1), 16);
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      const [local, remote, state, inode] = [f[1], f[2], f[3], f[9]];
      if (local === undefined || remote === undefined || inode === undefined) continue;
      out.push({
        localPort: port(local),
        remotePort: port(remote),
        listening: state === '0A',
        link: `socket:[${inode}]`,
      });
    }
  }
  return out;
}

/** The process holding a socket that listens on `port` here, if /proc lets us see it. */
export function listenerPid(port: number): number | undefined {
  const wanted = new Set(
    tcpSockets()
      .filter((s) => s.listening && s.localPort === port)
      .map((s) => s.link),
  );
  if (wanted.size === 0) return undefined;
  for (const pid of numericDirs('/proc')) {
    for (const link of socketLinks(Number(pid))) if (wanted.has(link)) return Number(pid);
  }
  return undefined;
}

export function pidByName(names: readonly string[]): number | undefined {
  for (const pid of numericDirs('/proc')) {
    if (names.includes(readComm(pid) ?? '')) return Number(pid);
  }
  return undefined;
}

export function readComm(pid: number | string): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return undefined;
  }
}

interface ProcStat {
  ppid: number;
  /** utime + stime, ticks. */
  own: number;
  /** cutime + cstime: children that exited and were reaped, ticks. */
  reaped: number;
}

/** `/proc/<path>/stat`: a process ("123") or one of its threads ("123/task/456"). */
export function procStat(path: number | string): ProcStat | undefined {
  try {
    const stat = readFileSync(`/proc/${path}/stat`, 'utf8');
    // fields[0] is field 3 (state): ppid is field 4, utime..cstime fields 14-17.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { ppid: Number(f[1]), own: Number(f[11]) + Number(f[12]), reaped: Number(f[13]) + Number(f[14]) };
  } catch {
    return undefined;
  }
}

/** The process's CPU so far (every thread, live or ended). */
export function processCpuUs(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  const s = procStat(pid);
  return s === undefined ? undefined : ticksToUs(s.own);
}

/** CPU so far of each live thread of `pid`, by thread id. */
export function threadCpuUs(pid: number | undefined): Map<number, number> {
  const out = new Map<number, number>();
  if (pid === undefined) return out;
  for (const tid of numericDirs(`/proc/${pid}/task`)) {
    const s = procStat(`${pid}/task/${tid}`);
    if (s !== undefined) out.set(Number(tid), ticksToUs(s.own));
  }
  return out;
}

/** CPU so far of each live child of `rootPid`, by pid. */
export function childCpuUs(rootPid: number | undefined): Map<number, number> {
  const out = new Map<number, number>();
  if (rootPid === undefined) return out;
  for (const pid of numericDirs('/proc')) {
    const s = procStat(pid);
    if (s !== undefined && s.ppid === rootPid) out.set(Number(pid), ticksToUs(s.own));
  }
  return out;
}

/**
 * CPU so far of a server made of processes (PostgreSQL): the postmaster, its
 * live children, and the children it has reaped. A backend that ended is
 * counted through the postmaster's cutime, so the sum never goes back.
 */
export function processTreeCpuUs(
  rootPid: number | undefined,
  children: ReadonlyMap<number, number>,
): number | undefined {
  if (rootPid === undefined) return undefined;
  const root = procStat(rootPid);
  if (root === undefined) return undefined;
  let us = ticksToUs(root.own + root.reaped);
  for (const childUs of children.values()) us += childUs;
  return us;
}

/** Children of `rootPid` holding the server end of a TCP connection this process has open to `port`. */
export function peersOfOwnConnections(rootPid: number | undefined, port: number): Set<number> {
  const peers = new Set<number>();
  if (rootPid === undefined) return peers;
  const mine = socketLinks('self');
  const sockets = tcpSockets();
  const myPorts = new Set(sockets.filter((s) => mine.has(s.link) && s.remotePort === port).map((s) => s.localPort));
  const serverEnds = new Set(
    sockets.filter((s) => !s.listening && s.localPort === port && myPorts.has(s.remotePort)).map((s) => s.link),
  );
  if (serverEnds.size === 0) return peers;
  for (const pid of childCpuUs(rootPid).keys()) {
    for (const link of socketLinks(pid)) {
      if (serverEnds.has(link)) {
        peers.add(pid);
        break;
      }
    }
  }
  return peers;
}

/** What `own` units (threads or processes) used between two readings; one not there before started within. */
export function ownCpuDeltaUs(
  before: ReadonlyMap<number, number>,
  after: ReadonlyMap<number, number>,
  own: ReadonlySet<number>,
): number {
  let us = 0;
  for (const id of own) {
    const now = after.get(id);
    if (now !== undefined) us += now - (before.get(id) ?? 0);
  }
  return us;
}
