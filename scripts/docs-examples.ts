/**
 * The code blocks of README.md and docs/ (its folders too) are copies of example files (examples/): a TS/JS block
 * has a `<!-- example: examples/x.ts -->` line above it, or `…x.ts#name` for the lines between
 * `// #region name` and `// #endregion name` (all such parts, in order). `npm run docs:examples` rewrites every block
 * from its file; test/doc-examples.test.ts fails when one differs, and runs the examples.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** A TypeScript or JavaScript block of a doc, and the example (a file or a region of one) it shows. */
export interface DocBlock {
  doc: string;
  /** Line numbers (0-based) of the block's opening and closing fences. */
  open: number;
  close: number;
  body: string;
  /** `examples/x.ts` or `examples/x.ts#name`, from the line just above the block. */
  source: string | undefined;
}

const CODE = /^```(ts|typescript|js|javascript)\s*$/;
const MARK = /^<!-- example: (\S+) -->$/;

/** README.md and every page of docs/, its folders' (docs/design/, docs/operations/) included. */
const docFiles = (): string[] => [
  'README.md',
  ...(readdirSync(join(ROOT, 'docs'), { recursive: true }) as string[])
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f.split('\\').join('/')}`),
];

/** Every TS/JS block of README.md and docs/, its folders included. */
export function docBlocks(): DocBlock[] {
  const blocks: DocBlock[] = [];
  for (const doc of docFiles()) {
    const lines = readFileSync(join(ROOT, doc), 'utf8').split('\n');
    for (let i = 0; i < lines.length; i++) {
      if (!CODE.test(lines[i]!)) continue;
      const close = lines.findIndex((l, j) => j > i && l.startsWith('```'));
      blocks.push({
        doc,
        open: i,
        close,
        body: lines.slice(i + 1, close).join('\n'),
        source: MARK.exec(lines[i - 1] ?? '')?.[1],
      });
      i = close;
    }
  }
  return blocks;
}

/** What a doc shows of `source`: the whole file (without its region marks), or its region's lines, dedented. */
export function exampleText(source: string): string {
  const [file, region] = source.split('#');
  const lines = readFileSync(join(ROOT, file!), 'utf8').replace(/\n+$/, '').split('\n');
  if (region === undefined) return lines.filter((l) => !/^\s*\/\/ #(end)?region /.test(l)).join('\n');
  // A region may come in parts (setup the doc leaves out between them): the doc shows them in order.
  const body: string[] = [];
  let inside = false;
  for (const l of lines) {
    if (l.trim() === `// #region ${region}`) inside = true;
    else if (l.trim() === `// #endregion ${region}`) inside = false;
    else if (inside) body.push(l);
  }
  if (body.length === 0) throw new Error(`${file} has no region ${region}`);
  const indent = Math.min(...body.filter((l) => l.trim() !== '').map((l) => l.length - l.trimStart().length));
  return body.map((l) => l.slice(indent)).join('\n');
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const doc of docFiles()) {
    const lines = readFileSync(join(ROOT, doc), 'utf8').split('\n');
    // From the last block up, so the earlier blocks' line numbers hold.
    for (const b of docBlocks()
      .filter((x) => x.doc === doc && x.source !== undefined)
      .reverse()) {
      lines.splice(b.open + 1, b.close - b.open - 1, ...exampleText(b.source!).split('\n'));
    }
    writeFileSync(join(ROOT, doc), lines.join('\n'));
  }
  console.log('rewrote the example blocks of README.md and docs/');
}
