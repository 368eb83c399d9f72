// Fails when a tracked source line is longer than the limit the formatter keeps code to:
// the formatter wraps code, but not comments or string literals, so this check covers those.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const LIMIT = 120;
const files = execFileSync('git', ['ls-files', '*.ts', '*.tsx', '*.mjs'], { encoding: 'utf8' })
  .split('\n')
  .filter((f) => f !== '');
let over = 0;
for (const file of files) {
  readFileSync(file, 'utf8')
    .split('\n')
    .forEach((line, i) => {
      if ([...line].length <= LIMIT) return;
      over += 1;
      console.log(`${file}:${i + 1}: ${[...line].length} characters`);
    });
}
if (over > 0) {
  console.log(`${over} line(s) over ${LIMIT} characters`);
  process.exit(1);
}
