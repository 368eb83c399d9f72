import { describe, expect, test } from 'vitest';
import { truncate } from '../src/ledger/internal.js';
import { encodeJson, encodePayload, jsonFault } from '../src/ledger/json.js';
import { isWellFormedText } from '../src/ledger/well-formed.js';

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
    ['undefined inside an object (the key is left out, and reads back undefined)', { a: undefined, b: [null, 1] }],
    ['a Date (toJSON)', { at: new Date('2030-01-02T03:04:05.678Z') }],
    ['a toJSON returning a string', { v: { toJSON: () => 'as text' } }],
    ['a class instance with toJSON', { p: Object.assign(new Point(1, 2), { toJSON: () => ({ x: 1 }) }) }],
    ['an object without a prototype', Object.assign(Object.create(null) as object, { a: 1 })],
    ['deeper than the quick check walks', nested(40, 'leaf')],
    ['a top-level string', 'text'],
    ['a top-level null', null],
    [
      'well-formed astral characters (a surrogate pair), in a value and a key',
      { '\u{1F600}': 'smile \u{1F600}', s: '\ud83d\ude00' },
    ],
    ['text that looks like an escaped surrogate', { path: 'C:\\ud800\\x', s: '\\ud83d' }],
    ['a surrogate pair behind a toJSON', { v: { toJSON: () => '\u{1F600}' } }],
    ['a Buffer (its toJSON: type and data)', { b: Buffer.from('ab') }],
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
    [
      'a cycle',
      (() => {
        const o: Record<string, unknown> = {};
        o.self = o;
        return o;
      })(),
    ],
    ['a function deeper than the quick check walks', nested(40, () => 1)],
    ['NaN deeper than the quick check walks', nested(40, Number.NaN)],
    ['NaN behind a toJSON', { v: { toJSON: () => Number.NaN } }],
    ["NaN behind an array's own toJSON", { v: Object.assign([1], { toJSON: () => Number.NaN }) }],
    ['a function inside a class instance', { p: Object.assign(new Point(1, 2), { f: () => 1 }) }],
    ['a Map', { m: new Map([[1, 2]]) }],
    ['an empty Map', new Map()],
    ['a Set', { s: new Set([1]) }],
    ['a class instance without toJSON', { p: new Point(1, 2) }],
    ['an Error', { e: new Error('boom') }],
    ['a Uint8Array', { b: new Uint8Array([1, 2]) }],
    ['an ArrayBuffer', { b: new ArrayBuffer(4) }],
    ['a DataView', { b: new DataView(new ArrayBuffer(4)) }],
    ['a boxed string', { s: new String('x') }],
    ['a sparse array', [1, , 3]],
    ['undefined inside an array', { b: [undefined, 1] }],
    ['a symbol key', { [Symbol('k')]: 1, a: 2 }],
    ['an invalid Date', { at: new Date('not a date') }],
    ['a lone high surrogate in a string', { name: 'half an emoji \ud83d' }],
    ['a lone low surrogate in a string', ['\ude00']],
    ['a lone surrogate after an escaped backslash', { s: '\\\ud800' }],
    ['a lone surrogate in a key', { 'k\ud800': 1 }],
    ['a lone surrogate at the top', '\udfff'],
    ['a lone surrogate deeper than the quick check walks', nested(40, '\ud800')],
    ['a lone surrogate behind a toJSON', { v: { toJSON: () => 'x\ud800' } }],
    ['a Map behind a toJSON', { v: { toJSON: () => new Map() } }],
    ['a Map deeper than the quick check walks', nested(40, new Map())],
    ['a sparse array deeper than the quick check walks', nested(40, [1, , 2])],
    ['a class instance inside a Date-bearing (slow path) object', { at: new Date(0), p: new Point(1, 2) }],
    ['undefined inside an array in a slow-path object', { at: new Date(0), b: [undefined] }],
    ['a symbol key in a slow-path object', { at: new Date(0), o: { [Symbol('k')]: 1 } }],
  ])('%s: no faithful JSON', (_name, value) => {
    expect(encodeJson(value)).toBeUndefined();
  });
});

describe('encodePayload', () => {
  test('gives the JSON text, or says what is wrong', () => {
    expect(encodePayload({ a: 1 }, 100)).toEqual({ json: '{"a":1}' });
    expect(encodePayload('x'.repeat(10), 12)).toEqual({ json: `"${'x'.repeat(10)}"` });
    expect(encodePayload('x'.repeat(11), 12)).toEqual({
      error: 'must encode to at most 12 bytes of JSON',
      path: [],
      at: '',
    });
    expect(encodePayload('é'.repeat(5), 12)).toEqual({ json: `"${'é'.repeat(5)}"` });
    expect(encodePayload('é'.repeat(6), 12)).toHaveProperty('error');
    expect(encodePayload({ f: () => 1 }, 100)).toHaveProperty('error');
  });
});

describe('jsonFault', () => {
  test.each([
    ['a Map', { user: { roles: new Map() } }, ['user', 'roles'], /Map/],
    ['a Set in an array', { tags: [1, new Set()] }, ['tags', 1], /Set/],
    ['a lone surrogate in a nested string', { user: { name: 'Ada \ud83d' } }, ['user', 'name'], /well-formed/],
    ['a lone surrogate in a key', { user: { 'n\udc00': 1 } }, ['user', 'n\udc00'], /key.*well-formed/],
    ['a hole', { list: [1, , 3] }, ['list', 1], /sparse|hole/],
    ['undefined in an array', { list: [undefined] }, ['list', 0], /undefined/],
    ['a typed array', { bytes: new Uint8Array(2) }, ['bytes'], /Uint8Array/],
    ['a class instance', { p: new Point(1, 2) }, ['p'], /Point/],
    ['a symbol key', { o: { [Symbol('k')]: 1 } }, ['o'], /symbol/],
    ['NaN', { n: Number.NaN }, ['n'], /NaN/],
    ['a BigInt', { n: 1n }, ['n'], /BigInt/],
    ['a function', { f: () => 1 }, ['f'], /function/],
    ['an invalid Date', { at: new Date(Number.NaN) }, ['at'], /invalid Date/],
    ['undefined at the top', undefined, [], /undefined/],
    [
      'a cycle',
      (() => {
        const o: Record<string, unknown> = {};
        o.self = { back: o };
        return o;
      })(),
      ['self', 'back'],
      /cycle/,
    ],
  ])('%s: named by its path', (_name, value, path, message) => {
    expect(encodeJson(value)).toBeUndefined();
    const fault = jsonFault(value);
    expect(fault.path).toEqual(path);
    expect(fault.message).toMatch(message);
  });
});

describe('encodePayload names where the payload is wrong', () => {
  test('the path inside the payload, as text and as segments', () => {
    expect(encodePayload({ user: { name: 'x\ud800' } }, 100)).toMatchObject({
      at: '.user.name',
      path: ['user', 'name'],
    });
    expect(encodePayload({ 'a b': [0, new Map()] }, 100)).toMatchObject({ at: '["a b"][1]', path: ['a b', 1] });
    expect(encodePayload('x'.repeat(11), 12)).toMatchObject({ at: '', path: [] });
  });
});

describe('truncate (error texts)', () => {
  test('never cuts a surrogate pair, and mends a lone surrogate', () => {
    const cut = truncate(`abc\u{1F600}def`, 5);
    expect(cut).toBe('abc…');
    expect(isWellFormedText(cut ?? '')).toBe(true);
    expect(truncate(`ab\u{1F600}`, 5)).toBe(`ab\u{1F600}`);
    expect(truncate('boom \ud83d here', 100)).toBe('boom \ufffd here');
    expect(truncate(null, 5)).toBeNull();
  });
});
