import { spawnSync } from 'node:child_process';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, test } from 'vitest';

// What a TypeScript user meets: the package as `npm pack` makes it, installed into a project of the user's own,
// and a user's files (examples/, whose copies the docs show, and the entry points) compiled against its shipped
// declarations with tsc's defaults, skipLibCheck off, under both module resolutions a user picks.

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');
const EXAMPLES = join(ROOT, 'examples');
/** Installed beside lanewake in the user's project: its dependencies, and what a user's files import themselves. */
const manifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  dependencies: Record<string, string>;
};
const USER_PACKAGES = [...Object.keys(manifest.dependencies), '@types/node', 'vitest'];

let work: string;
let project: string;

function run(cmd: string, args: string[], cwd: string): string {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${r.status}:\n${r.stdout}${r.stderr}`);
  return r.stdout;
}

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'lw-package-'));
  // The package: the build's declarations and code (not this worktree's dist, which may be stale), packed by npm
  // with package.json's `files` and `exports` as published.
  const pkg = join(work, 'pkg');
  mkdirSync(pkg);
  run(
    process.execPath,
    [TSC, '-p', join(ROOT, 'tsconfig.build.json'), '--outDir', join(pkg, 'dist'), '--sourceMap', 'false'],
    ROOT,
  );
  copyFileSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
  const packed = JSON.parse(run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], pkg)) as {
    filename: string;
  }[];
  const tarball = join(work, packed[0]!.filename);

  // The user's project: lanewake unpacked as npm installs it; the packages beside it are this repository's copies.
  // The optional peer @opentelemetry/api is left out, as most users have none.
  project = join(work, 'user');
  const lanewake = join(project, 'node_modules/lanewake');
  mkdirSync(lanewake, { recursive: true });
  run('tar', ['xzf', tarball, '-C', lanewake, '--strip-components=1'], work);
  for (const name of USER_PACKAGES) {
    mkdirSync(dirname(join(project, 'node_modules', name)), { recursive: true });
    symlinkSync(join(ROOT, 'node_modules', name), join(project, 'node_modules', name));
  }
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'a-user', private: true, type: 'module' }));
  for (const file of readdirSync(EXAMPLES).filter((f) => f.endsWith('.ts')))
    copyFileSync(join(EXAMPLES, file), join(project, file));
  writeFileSync(
    join(project, 'entry-points.ts'),
    [
      "import * as lanewake from 'lanewake';",
      "import * as testing from 'lanewake/testing';",
      'export const surface = [lanewake, testing];',
    ].join('\n'),
  );
}, 400_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

/** tsc's defaults (skipLibCheck off) with the strictness this repository holds itself to. */
function compile(module: string, moduleResolution: string): { status: number | null; output: string } {
  const config = {
    compilerOptions: {
      target: 'ES2022',
      lib: ['ES2023'],
      module,
      moduleResolution,
      types: ['node'],
      strict: true,
      noUncheckedIndexedAccess: true,
      noEmit: true,
    },
    include: ['*.ts'],
  };
  const file = join(project, `tsconfig.${moduleResolution}.json`);
  writeFileSync(file, JSON.stringify(config));
  const r = spawnSync(process.execPath, [TSC, '-p', file], { cwd: project, encoding: 'utf8' });
  return { status: r.status, output: `${r.stdout}${r.stderr}`.trim() };
}

test.each([
  ['ESNext', 'bundler'],
  ['Node16', 'node16'],
])(
  'a user file compiles against the packed declarations, skipLibCheck off (module %s, moduleResolution %s)',
  (module, moduleResolution) => {
    const r = compile(module, moduleResolution);
    expect(r.output).toBe('');
    expect(r.status).toBe(0);
  },
  300_000,
);
