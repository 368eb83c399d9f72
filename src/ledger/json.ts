// JSON values as the ledger stores them (payloads, checkpoints, results,
// reasons): accepted only if JSON.parse gives them back (docs/design/work-item.md,
// "What a payload, checkpoint or result may hold"), encoded once.

import { isWellFormedText, NOT_WELL_FORMED } from './well-formed.js';

/** Where inside a JSON value: keys and array indices from the top. */
export type JsonPath = readonly (string | number)[];

/**
 * What is wrong with a payload, and where inside it: `at` is the path as text (`.user.name`, `[3]`, '' for the whole).
 */
export interface JsonValueError {
  error: string;
  path: JsonPath;
  at: string;
}

/**
 * The payload (or checkpoint, result, reason) as the ledger stores it, or
 * what is wrong with it. One encoding per item: the ledger validates and
 * stores the same text. Finding where a value is wrong walks it again, on
 * the error path only.
 */
export function encodePayload(payload: unknown, maxBytes: number): { json: string } | JsonValueError {
  const json = encodeJson(payload);
  if (json === undefined) {
    const fault = jsonFault(payload);
    return { error: fault.message, path: fault.path, at: jsonPathText(fault.path) };
  }
  // UTF-8 takes at most 3 bytes per UTF-16 unit: most payloads need no count.
  if (json.length > maxBytes / 3 && Buffer.byteLength(json, 'utf8') > maxBytes) {
    return { error: `must encode to at most ${maxBytes} bytes of JSON`, path: [], at: '' };
  }
  return { json };
}

/**
 * JSON text for a value, or undefined when JSON would not carry it
 * faithfully: JSON.parse of the text must give the value back. Refused:
 * undefined at the top or inside an array (and holes), functions, symbols
 * (as values or keys), BigInt, cycles, NaN and ±Infinity, invalid Dates,
 * strings or keys that are not well-formed UTF-16, and objects whose
 * prototype is neither Object.prototype nor null and that have no toJSON
 * (Map, Set, typed arrays, ArrayBuffer, DataView, Error, class instances).
 * Accepted as JSON writes them: a toJSON's answer (a valid Date's ISO text),
 * undefined object properties (left out), -0 (written 0). `jsonFault` says
 * what and where.
 */
export function encodeJson(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  let text: string | undefined;
  try {
    if (plainlyFaithful(value, 0)) {
      text = JSON.stringify(value);
    } else {
      // toJSON, deep nesting or something unfaithful somewhere: a replacer sees
      // every value after toJSON, exactly as it is written.
      let faithful = true;
      text = JSON.stringify(value, function (this: unknown, key: string, v: unknown) {
        if (faithful && !faithfulAsWritten(this, key, v)) faithful = false;
        return v;
      });
      if (!faithful) return undefined;
    }
  } catch {
    return undefined;
  }
  if (typeof text !== 'string' || hasLoneSurrogate(text)) return undefined;
  return text;
}

/**
 * JSON.stringify writes a lone surrogate, in a string or a key, as a `\udXXX`
 * escape (and a well-formed pair as itself), so one search of the text finds
 * every one, toJSON output included. The `\u` must follow an even run of
 * backslashes: after an odd run its backslash ends an escaped backslash.
 */
function hasLoneSurrogate(json: string): boolean {
  return json.includes('\\ud') && LONE_SURROGATE_ESCAPE.test(json);
}
const LONE_SURROGATE_ESCAPE = /(?:^|[^\\])(?:\\\\)*\\ud[89a-f]/;

/** The replacer's check of one value as JSON.stringify is about to write it (after toJSON) into `holder`. */
function faithfulAsWritten(holder: unknown, key: string, v: unknown): boolean {
  switch (typeof v) {
    case 'function':
    case 'symbol':
      return false;
    case 'number':
      return Number.isFinite(v);
    case 'undefined':
      // Dropped from an object (reads back undefined), but null in an array.
      return !Array.isArray(holder);
    case 'object': {
      if (v === null) {
        // An invalid Date's toJSON answers null.
        const before = (holder as Record<string, unknown>)[key];
        return !(before instanceof Date);
      }
      if (Array.isArray(v)) return true;
      const proto: unknown = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) return false;
      return !hasEnumerableSymbolKey(v);
    }
    default:
      return true;
  }
}

function hasEnumerableSymbolKey(value: object): boolean {
  const symbols = Object.getOwnPropertySymbols(value);
  return symbols.length > 0 && symbols.some((s) => Object.prototype.propertyIsEnumerable.call(value, s));
}

/** Nesting the quick check walks before it leaves the value to the replacer. */
const QUICK_DEPTH = 32;

/**
 * True when `value` holds only strings, booleans, finite numbers, null,
 * undefined object properties (dropped by JSON) and plain arrays (no holes,
 * no undefined) and plain objects (no symbol keys) of those, within
 * QUICK_DEPTH levels, so JSON.stringify without a replacer writes it
 * faithfully; strings are checked on the text (`hasLoneSurrogate`). False
 * means "check it the slow way", not "unfaithful". A replacer is called for
 * every value, which made it most of an enqueue's encoding cost.
 */
function plainlyFaithful(value: unknown, depth: number): boolean {
  switch (typeof value) {
    case 'string':
    case 'boolean':
    case 'undefined':
      return true;
    case 'number':
      return Number.isFinite(value);
    case 'object': {
      if (value === null) return true;
      if (depth >= QUICK_DEPTH) return false;
      if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return false;
      if (Array.isArray(value)) {
        // A hole reads as undefined here; both would come back as null.
        for (const v of value) if (v === undefined || !plainlyFaithful(v, depth + 1)) return false;
        return true;
      }
      const proto: unknown = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return false;
      if (Object.getOwnPropertySymbols(value).length > 0) return false;
      for (const key in value) {
        if (Object.hasOwn(value, key) && !plainlyFaithful((value as Record<string, unknown>)[key], depth + 1))
          return false;
      }
      return true;
    }
    default:
      return false;
  }
}

/** What is wrong with a value `encodeJson` refused, and where: the first fault in JSON.stringify's order. */
export interface JsonFault {
  path: JsonPath;
  message: string;
}

const NO_FAITHFUL_JSON = 'has no faithful JSON form';

/**
 * Walks `value` as JSON.stringify does (toJSON first, the same keys in the
 * same order) to name the first part JSON would refuse or change. For error
 * messages only: it allocates a path per step.
 */
export function jsonFault(value: unknown): JsonFault {
  try {
    return findFault({ '': value }, '', value, [], new Set()) ?? { path: [], message: NO_FAITHFUL_JSON };
  } catch (error) {
    // A toJSON that throws, or nesting deeper than the stack.
    return { path: [], message: `${NO_FAITHFUL_JSON} (${error instanceof Error ? error.message : String(error)})` };
  }
}

function findFault(
  holder: object,
  key: string,
  value: unknown,
  path: JsonPath,
  ancestors: Set<object>,
): JsonFault | undefined {
  let v = value;
  if ((typeof v === 'object' && v !== null) || typeof v === 'bigint') {
    const toJSON = (v as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function') {
      if (v instanceof Date && Number.isNaN(v.getTime()))
        return { path, message: 'is an invalid Date, which JSON would store as null' };
      v = toJSON.call(v, key) as unknown;
    }
  }
  switch (typeof v) {
    case 'string':
      return isWellFormedText(v) ? undefined : { path, message: NOT_WELL_FORMED };
    case 'number':
      return Number.isFinite(v) ? undefined : { path, message: `is ${String(v)}, which JSON would store as null` };
    case 'boolean':
      return undefined;
    case 'bigint':
      return { path, message: 'is a BigInt, which JSON cannot store (send it as a string)' };
    case 'function':
      return { path, message: 'is a function, which JSON would drop' };
    case 'symbol':
      return { path, message: 'is a symbol, which JSON would drop' };
    case 'undefined':
      if (path.length === 0) return { path, message: 'is undefined: give a JSON value (null for none)' };
      return Array.isArray(holder)
        ? { path, message: 'is undefined inside an array, which JSON would store as null' }
        : undefined;
  }
  if (v === null) return undefined;
  const obj = v as object;
  if (ancestors.has(obj))
    return { path, message: 'refers back to a value that contains it (a cycle), which JSON cannot store' };
  ancestors.add(obj);
  try {
    if (Array.isArray(obj)) {
      for (let i = 0; i < obj.length; i++) {
        if (!(i in obj))
          return { path: [...path, i], message: 'is a hole in a sparse array, which JSON would store as null' };
        const fault = findFault(obj, String(i), obj[i], [...path, i], ancestors);
        if (fault) return fault;
      }
      return undefined;
    }
    const proto: unknown = Object.getPrototypeOf(obj);
    if (proto !== Object.prototype && proto !== null) return { path, message: instanceFault(obj) };
    if (hasEnumerableSymbolKey(obj)) return { path, message: 'has a symbol key, which JSON would drop' };
    for (const k of Object.keys(obj)) {
      if (!isWellFormedText(k)) return { path: [...path, k], message: `is a key that ${NOT_WELL_FORMED}` };
      const fault = findFault(obj, k, (obj as Record<string, unknown>)[k], [...path, k], ancestors);
      if (fault) return fault;
    }
    return undefined;
  } finally {
    ancestors.delete(obj);
  }
}

/** Why JSON would not carry an object of some class. */
function instanceFault(obj: object): string {
  if (obj instanceof Map) return 'is a Map, which JSON would store as {} (send Object.fromEntries(map) or [...map])';
  if (obj instanceof Set) return 'is a Set, which JSON would store as {} (send [...set])';
  if (obj instanceof Error) return 'is an Error, which JSON would store as {} (send its message)';
  const name = constructorName(obj);
  if (ArrayBuffer.isView(obj) || obj instanceof ArrayBuffer) {
    return `is a binary ${name}, which JSON does not store faithfully (send an array of numbers or a base64 string)`;
  }
  return `is an instance of ${
    name
  } without toJSON, which JSON would store as a plain object or lose (send a plain object, or give the class a toJSON)`;
}

function constructorName(obj: object): string {
  try {
    const ctor = (Object.getPrototypeOf(obj) as { constructor?: { name?: unknown } }).constructor;
    return typeof ctor?.name === 'string' && ctor.name !== '' ? ctor.name : 'a class';
  } catch {
    return 'a class';
  }
}

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

/** A path inside a value as text to append to a field name: `.user.name`, `[3]`, `["a b"]`; '' for the value itself. */
export function jsonPathText(path: JsonPath): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += IDENTIFIER.test(part) ? `.${part}` : `[${JSON.stringify(part)}]`;
  }
  return out;
}
