import { inject } from 'vitest';

/** Server URL (no database) of the ledger the tests use: the local MariaDB unless the container setup replaced it. */
export function mysqlServerUrl(): string {
  return inject('mysqlServerUrl');
}

export function redisUrl(): string {
  return inject('redisUrl');
}

declare module 'vitest' {
  export interface ProvidedContext {
    mysqlServerUrl: string;
    redisUrl: string;
  }
}
