import { describe, expect, test } from 'vitest';
import { encodeJson, encodePayload } from '../src/ledger/validation.js';

/** Nested `depth` levels deep, with `leaf` at the bottom. */
function nested(depth: number, leaf: unknown): unknown {
  let v: unknown = leaf;
  for (let i = 0; i < depth; i++) v = i % 2 === 0 ? { k: v } : [v];
  return v;
}

class Point {
  constructor(
    readonly x: number,
    readonly y: number,
  ) {}
}

describe('encodeJson', () => {
  test.each([
    ['a plain object', { a: 1, b: 'two', c: [true, null, -0, 1.5e300], d: { e: {} } }],
    ['undefined inside an object and an array', { a: undefined, b: [undefined, 1] }],
    ['a Date (toJSON)', { at: new Date('2030-01-02T03:04:05.678Z') }],
    ['a toJSON returning a string', { v: { toJSON: () => 'as text' } }],
    ['a Map and a Set (no own keys)', { m: new Map([[1, 2]]), s: new Set([1]) }],
    ['a class instance', { p: new Point(1, 2) }],
    ['an object without a prototype', Object.assign(Object.create(null) as object, { a: 1 })],
    ['a sparse array', [1, , 3]],
    ['deeper than the quick check walks', nested(40, 'leaf')],
    ['a top-level string', 'text'],
    ['a top-level null', null],
  ])('%s: the same text as JSON.stringify', (_name, value) => {
    expect(encodeJson(value)).toBe(JSON.stringify(value));
  });

  test.each([
    ['undefined at the top', undefined],
    ['a function', () => 1],
    ['a function inside an object', { f: () => 1 }],
    ['a symbol inside an array', [Symbol('s')]],
    ['NaN', { n: Number.NaN }],
    ['Infinity inside an array', [1, Number.POSITIVE_INFINITY]],
    ['a BigInt', { n: 10n }],
    ['a cycle', (() => { const o: Record<string, unknown> = {}; o.self = o; return o; })()],
    ['a function deeper than the quick check walks', nested(40, () => 1)],
    ['NaN deeper than the quick check walks', nested(40, Number.NaN)],
    ['NaN behind a toJSON', { v: { toJSON: () => Number.NaN } }],
    ['NaN behind an array\'s own toJSON', { v: Object.assign([1], { toJSON: () => Number.NaN }) }],
    ['a function inside a class instance', { p: Object.assign(new Point(1, 2), { f: () => 1 }) }],
  ])('%s: no faithful JSON', (_name, value) => {
    expect(encodeJson(value)).toBeUndefined();
  });
});

describe('encodePayload', () => {
  test('gives the JSON text, or says what is wrong', () => {
    expect(encodePayload({ a: 1 }, 100)).toEqual({ json: '{"a":1}' });
    expect(encodePayload('x'.repeat(10), 12)).toEqual({ json: `"${'x'.repeat(10)}"` });
    expect(encodePayload('x'.repeat(11), 12)).toEqual({ error: 'must encode to at most 12 bytes of JSON' });
    expect(encodePayload({ f: () => 1 }, 100)).toHaveProperty('error');
  });
});
