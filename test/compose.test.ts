import { readFileSync } from 'node:fs';
import { expect, test } from 'vitest';
import { parse } from 'yaml';

// docker-compose.yml is for local development and must be safe by default: TiDB's root has no
// password and Redis no auth, so nothing may be published beyond the loopback address, and the
// demo starts only once what it needs answers. (No Docker engine here: this checks the file.)

interface Service {
  ports?: unknown[];
  healthcheck?: { test?: unknown };
  depends_on?: string[] | Record<string, { condition?: string }>;
}

const compose = parse(readFileSync(new URL('../docker-compose.yml', import.meta.url), 'utf8')) as {
  services: Record<string, Service>;
};

/** Each published port as the host address it binds, from the short ("ip:host:container") or long syntax. */
function publishedHosts(ports: readonly unknown[]): (string | undefined)[] {
  return ports.map((p) => {
    // Long syntax: without host_ip (with or without a published port, random if none) it binds every interface.
    if (typeof p === 'object' && p !== null) {
      const long = p as { host_ip?: unknown };
      return typeof long.host_ip === 'string' ? long.host_ip : undefined;
    }
    // host_ip:[host]:container[/proto]; an IPv6 host ip is bracketed. Fewer parts: every interface.
    const m = /^(\[[^\]]+\]|[^:[\]]+):[^:]*:[^:]+$/.exec(String(p));
    return m?.[1];
  });
}

test('every published port of docker-compose.yml is bound to the loopback address only', () => {
  const published = Object.entries(compose.services).flatMap(([name, s]) =>
    publishedHosts(s.ports ?? []).map((host) => ({ service: name, host })),
  );
  expect(published.map((p) => p.service).sort()).toEqual(['redis', 'tidb']);
  for (const p of published) expect(p.host ?? 'every interface', p.service).toMatch(/^(127\.0\.0\.1|\[::1\]|::1)$/);
});

test('the demo waits until each service it depends on is healthy, and each has a healthcheck', () => {
  const demo = compose.services.demo;
  const deps = demo?.depends_on;
  expect(deps !== undefined && !Array.isArray(deps), 'depends_on in the long form, with conditions').toBe(true);
  const conditions = Object.entries(deps as Record<string, { condition?: string }>);
  expect(conditions.map(([name]) => name).sort()).toEqual(['redis', 'tidb']);
  for (const [name, dep] of conditions) {
    expect(dep.condition, name).toBe('service_healthy');
    expect(compose.services[name]?.healthcheck?.test, `${name} healthcheck`).toBeDefined();
  }
});

test('the port check itself tells a loopback binding from one on every interface', () => {
  expect(
    publishedHosts([
      '127.0.0.1:4000:4000',
      '127.0.0.1::4000',
      '4000:4000',
      '0.0.0.0:1:1',
      '[::1]:2:2',
      6379,
      { target: 1, published: 2 },
      { target: 1, published: 2, host_ip: '127.0.0.1' },
    ]),
  ).toEqual(['127.0.0.1', '127.0.0.1', undefined, '0.0.0.0', '[::1]', undefined, undefined, '127.0.0.1']);
});
