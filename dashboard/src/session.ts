// The operator's token and name, asked once per browser session (sessionStorage: gone when the tab closes).

export interface Credentials {
  token: string;
  name: string;
}

const TOKEN = 'lanewake.adminToken';
const NAME = 'lanewake.actor';

export function currentCredentials(): Credentials | null {
  const token = sessionStorage.getItem(TOKEN);
  if (token === null || token === '') return null;
  return { token, name: sessionStorage.getItem(NAME) ?? '' };
}

/** Fired on window when the stored credentials change. */
export const CREDENTIALS_EVENT = 'lanewake-credentials';

export function saveCredentials(c: Credentials): void {
  sessionStorage.setItem(TOKEN, c.token);
  sessionStorage.setItem(NAME, c.name);
  dispatchEvent(new Event(CREDENTIALS_EVENT));
}

export function forgetToken(): void {
  sessionStorage.removeItem(TOKEN);
  dispatchEvent(new Event(CREDENTIALS_EVENT));
}

export function lastName(): string {
  return sessionStorage.getItem(NAME) ?? '';
}

type Asker = (done: (c: Credentials | null) => void) => void;
let asker: Asker | null = null;

/** The app's credentials dialog registers here. */
export function setCredentialsAsker(a: Asker | null): void {
  asker = a;
}

/** The stored credentials, or the operator's answer to the dialog (null: they closed it). */
export function requireCredentials(): Promise<Credentials | null> {
  const c = currentCredentials();
  if (c !== null) return Promise.resolve(c);
  const ask = asker;
  if (ask === null) return Promise.resolve(null);
  return new Promise((resolve) =>
    ask((answer) => {
      if (answer !== null) saveCredentials(answer);
      resolve(answer);
    }),
  );
}
