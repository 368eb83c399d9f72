import { useEffect, useState } from 'preact/hooks';
import { ITEM_STATES, type ItemFilter, type ItemState } from './types.js';

// Hash routes: #/ queues, #/queues/<q>?state=…&type=… items, #/items/<id>, #/queues/<q>/lanes,
// #/queues/<q>/lanes/<lane>, #/dead?queue=…, #/schedules

export type Route =
  | { page: 'queues' }
  | { page: 'items'; queue: string; filter: ItemFilter; after: string | null }
  | { page: 'item'; id: string }
  | { page: 'lanes'; queue: string }
  | { page: 'lane'; queue: string; lane: string; after: string | null }
  | { page: 'dead'; queue: string | null }
  | { page: 'schedules' }
  | { page: 'missing'; hash: string };

const FILTER_KEYS = ['type', 'lane', 'key', 'idempotencyKey', 'id'] as const;

function isState(s: string | null): s is ItemState {
  return s !== null && (ITEM_STATES as readonly string[]).includes(s);
}

export function parseHash(hash: string): Route {
  const raw = hash.replace(/^#/, '') || '/';
  const [path = '/', search = ''] = raw.split('?', 2);
  const params = new URLSearchParams(search);
  const parts = path
    .split('/')
    .filter((p) => p !== '')
    .map((p) => decodeURIComponent(p));
  const after = params.get('after');
  if (parts.length === 0 || (parts.length === 1 && parts[0] === 'queues')) return { page: 'queues' };
  if (parts[0] === 'dead' && parts.length === 1) return { page: 'dead', queue: params.get('queue') };
  if (parts[0] === 'schedules' && parts.length === 1) return { page: 'schedules' };
  if (parts[0] === 'items' && parts.length === 2) return { page: 'item', id: parts[1] ?? '' };
  if (parts[0] === 'queues' && parts[1] !== undefined) {
    const queue = parts[1];
    if (parts.length === 2) {
      const filter: ItemFilter = {};
      const state = params.get('state');
      if (isState(state)) filter.state = state;
      for (const k of FILTER_KEYS) {
        const v = params.get(k);
        if (v !== null && v !== '') filter[k] = v;
      }
      return { page: 'items', queue, filter, after };
    }
    if (parts[2] === 'lanes' && parts.length === 3) return { page: 'lanes', queue };
    if (parts[2] === 'lanes' && parts.length === 4) return { page: 'lane', queue, lane: parts[3] ?? '', after };
  }
  return { page: 'missing', hash: raw };
}

function withQuery(path: string, params: Record<string, string | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s === '' ? path : `${path}?${s}`;
}

const e = encodeURIComponent;

export const href = {
  queues: (): string => '#/',
  items: (queue: string, filter: ItemFilter = {}, after: string | null = null): string =>
    withQuery(`#/queues/${e(queue)}`, { ...filter, after }),
  item: (id: string): string => `#/items/${e(id)}`,
  lanes: (queue: string): string => `#/queues/${e(queue)}/lanes`,
  lane: (queue: string, lane: string, after: string | null = null): string =>
    withQuery(`#/queues/${e(queue)}/lanes/${e(lane)}`, { after }),
  dead: (queue: string | null = null): string => withQuery('#/dead', { queue }),
  schedules: (): string => '#/schedules',
};

export function navigate(to: string): void {
  location.hash = to.replace(/^#/, '');
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseHash(location.hash));
  useEffect(() => {
    const onChange = (): void => setRoute(parseHash(location.hash));
    addEventListener('hashchange', onChange);
    return () => removeEventListener('hashchange', onChange);
  }, []);
  return route;
}
