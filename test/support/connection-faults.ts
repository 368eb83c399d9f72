// The two faults of test/ledger-connection-faults.test.ts: a pooled connection killed while this process is busy
// (BusyKiller), and a statement's answer lost on the way (FaultProxy).
import { createServer, connect, type Server, type Socket } from 'node:net';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { mysqlServerUrl } from './services.js';

const require = createRequire(import.meta.url);
export const serverUrl = new URL(mysqlServerUrl());

/** Kills connections from another thread while this one blocks (Atomics.wait): their close stays unread here. */
export class BusyKiller {
  private readonly flags = new Int32Array(new SharedArrayBuffer(8));
  private readonly worker: Worker;

  constructor() {
    this.worker = new Worker(
      `const { parentPort, workerData } = require('node:worker_threads');
       const { createConnection } = require(workerData.mysql2);
       const flags = new Int32Array(workerData.flags);
       const done = (v) => { Atomics.store(flags, 0, v); Atomics.notify(flags, 0); };
       createConnection(workerData.server).then((c) => {
         parentPort.on('message', async (id) => {
           try {
             await c.query('KILL CONNECTION ' + Number(id));
             // Gone from the server's list: its socket is closed.
             const listed = 'SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE ID = ?';
             for (;;) {
               const [rows] = await c.query(listed, [id]);
               if (Number(rows[0].n) === 0) break;
             }
             done(1);
           } catch (e) { done(2); }
         });
         Atomics.store(flags, 1, 1); Atomics.notify(flags, 1);
       }, () => { Atomics.store(flags, 1, 2); Atomics.notify(flags, 1); });`,
      {
        eval: true,
        workerData: {
          flags: this.flags.buffer,
          mysql2: require.resolve('mysql2/promise'),
          server: {
            host: serverUrl.hostname,
            port: Number(serverUrl.port || 3306),
            user: decodeURIComponent(serverUrl.username || 'root'),
            password: decodeURIComponent(serverUrl.password),
          },
        },
      },
    );
  }

  ready(): void {
    Atomics.wait(this.flags, 1, 0, 10_000);
    if (Atomics.load(this.flags, 1) !== 1) throw new Error('killer: no connection');
  }

  killWhileBusy(connectionId: number): void {
    Atomics.store(this.flags, 0, 0);
    this.worker.postMessage(connectionId);
    Atomics.wait(this.flags, 0, 0, 10_000);
    if (Atomics.load(this.flags, 0) !== 1) throw new Error(`killer: KILL ${connectionId} failed`);
  }

  close(): Promise<number> {
    return this.worker.terminate();
  }
}

export type Cut = 'hold-reply' | 'drop-request';

/**
 * TCP proxy to the ledger's server that, once armed, loses one statement
 * matching `match`: the MySQL protocol's COM_QUERY packets are read to find
 * it, and COM_STMT_EXECUTE packets by the text their statement was prepared
 * with (a TiDB ledger sends its hot statements prepared).
 */
export class FaultProxy {
  private armed: { match: RegExp; cut: Cut; fired: () => void } | undefined;
  private held: (() => void) | undefined;

  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(target: { host: string; port: number }): Promise<FaultProxy> {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    if (address === null || typeof address === 'string') throw new Error('proxy: no port');
    const proxy = new FaultProxy(server, address.port);
    server.on('connection', (client) => proxy.pipe(client, connect(target.port, target.host)));
    return proxy;
  }

  /** The next matching query is lost; resolves once it was met. */
  arm(match: RegExp, cut: Cut): Promise<void> {
    return new Promise((resolve) => (this.armed = { match, cut, fired: resolve }));
  }

  /** Cuts the connection whose reply is held. */
  cut(): void {
    this.held?.();
    this.held = undefined;
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private pipe(client: Socket, upstream: Socket): void {
    let pending = Buffer.alloc(0);
    let holding = false;
    // Prepared statements of this connection, by the id the server gave them: the text of one awaiting
    // its answer, whose first packet (PREPARE_OK: 0x00, then the id) starts the next data from the server.
    const prepared = new Map<number, string>();
    let preparing: string | undefined;
    let answer = Buffer.alloc(0);
    const cutBoth = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', cutBoth);
    upstream.on('error', cutBoth);
    client.on('close', cutBoth);
    upstream.on('close', cutBoth);
    upstream.on('data', (data) => {
      if (preparing !== undefined) {
        answer = Buffer.concat([answer, data]);
        if (answer.length >= 9) {
          if (answer[4] === 0x00) prepared.set(answer.readUInt32LE(5), preparing);
          preparing = undefined;
          answer = Buffer.alloc(0);
        }
      }
      if (!holding) client.write(data);
    });
    client.on('data', (data) => {
      pending = Buffer.concat([pending, data]);
      while (pending.length >= 4) {
        const length = pending.readUIntLE(0, 3);
        if (pending.length < 4 + length) break;
        const packet = pending.subarray(0, 4 + length);
        pending = pending.subarray(4 + length);
        const armed = this.armed;
        const command = packet[3] === 0 ? packet[4] : undefined;
        if (command === 0x16) preparing = packet.subarray(5).toString('utf8');
        const text =
          command === 0x03
            ? packet.subarray(5).toString('utf8')
            : command === 0x17
              ? prepared.get(packet.readUInt32LE(5))
              : undefined;
        if (armed && text !== undefined && armed.match.test(text)) {
          this.armed = undefined;
          if (armed.cut === 'drop-request') {
            cutBoth();
            armed.fired();
            return;
          }
          holding = true;
          this.held = cutBoth;
          upstream.write(packet);
          armed.fired();
          continue;
        }
        upstream.write(packet);
      }
    });
  }
}
