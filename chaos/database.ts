/**
 * The run's own database and MariaDB user. The workers log in as that user
 * (through the fault proxy), so their sessions are the ones found by user in
 * the process list and killed; the harness and the producer connect directly
 * as the server's administrator.
 */
import { randomBytes } from 'node:crypto';
import { createConnection, type Connection, type RowDataPacket } from 'mysql2/promise';
import { Ledger } from '../src/index.js';
import { EFFECTS_TABLE } from './items.js';

const SERVER = { host: '127.0.0.1', port: 3306, user: 'root', password: '' };

export class ChaosDatabase {
  readonly name: string;
  readonly user: string;
  readonly password = randomBytes(12).toString('hex');
  private admin: Connection | undefined;
  private created = { database: false, user: false };

  constructor(runId: string) {
    this.name = `lw_chaos_${runId}`;
    this.user = `lwchaos_${runId}`.slice(0, 32);
  }

  /** The workers' URL, through the proxy listening on `port`. */
  workerUrl(port: number): string {
    return `mysql://${this.user}:${this.password}@127.0.0.1:${port}/${this.name}`;
  }

  /** The producer's and the checks' URL: straight to the server. */
  get directUrl(): string {
    return `mysql://${SERVER.user}@${SERVER.host}:${SERVER.port}/${this.name}`;
  }

  async create(): Promise<void> {
    const c = await this.connection();
    await c.query(`CREATE DATABASE \`${this.name}\``);
    this.created.database = true;
    await c.query(`CREATE USER '${this.user}'@'127.0.0.1' IDENTIFIED BY '${this.password}'`);
    this.created.user = true;
    await c.query(`GRANT ALL PRIVILEGES ON \`${this.name}\`.* TO '${this.user}'@'127.0.0.1'`);
    const ledger = new Ledger({ url: this.directUrl, poolSize: 1 });
    try {
      await ledger.migrate();
    } finally {
      await ledger.close();
    }
    await c.query(`CREATE TABLE \`${this.name}\`.${EFFECTS_TABLE} (
      item_id VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
      n INT NOT NULL,
      k INT NOT NULL,
      lane VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
      lane_seq BIGINT NULL,
      worker VARCHAR(32) NOT NULL,
      pid INT NOT NULL,
      attempt INT NOT NULL,
      started_us BIGINT NOT NULL,
      upsert_at DATETIME(6) NOT NULL,
      dup_worker VARCHAR(32) NULL,
      dup_attempt INT NULL,
      dup_at DATETIME(6) NULL,
      PRIMARY KEY (item_id)
    ) ENGINE=InnoDB`);
  }

  /** KILL CONNECTION for every session of the workers' user; returns how many were killed. */
  async killWorkerSessions(share = 1, random: () => number = Math.random): Promise<number> {
    const c = await this.connection();
    const [rows] = await c.query<RowDataPacket[]>(
      'SELECT ID AS id FROM information_schema.PROCESSLIST WHERE USER = ?',
      [this.user],
    );
    let killed = 0;
    for (const row of rows) {
      if (random() >= share) continue;
      try {
        await c.query(`KILL CONNECTION ${Number(row.id)}`);
        killed++;
      } catch {
        // Gone by itself between the list and the kill.
      }
    }
    return killed;
  }

  async query<T extends RowDataPacket>(text: string, values: unknown[] = []): Promise<T[]> {
    const c = await this.connection();
    const [rows] = await c.query<T[]>(text, values);
    return rows;
  }

  /** Drops what create() made; safe to call after a partial create and twice. */
  async drop(): Promise<void> {
    const c = await this.connection().catch(() => undefined);
    if (!c) return;
    try {
      if (this.created.user) {
        await this.killWorkerSessions().catch(() => 0);
        await c.query(`DROP USER IF EXISTS '${this.user}'@'127.0.0.1'`);
        this.created.user = false;
      }
      if (this.created.database) {
        await c.query(`DROP DATABASE IF EXISTS \`${this.name}\``);
        this.created.database = false;
      }
    } finally {
      await c.end().catch(() => undefined);
      this.admin = undefined;
    }
  }

  async close(): Promise<void> {
    await this.admin?.end().catch(() => undefined);
    this.admin = undefined;
  }

  private async connection(): Promise<Connection> {
    if (this.admin) return this.admin;
    const c = await createConnection({
      ...SERVER,
      supportBigNumbers: true,
      bigNumberStrings: false,
      decimalNumbers: true,
      timezone: 'Z',
    });
    await c.query("SET SESSION time_zone = '+00:00'");
    c.on('error', () => {
      this.admin = undefined;
    });
    this.admin = c;
    return c;
  }
}
