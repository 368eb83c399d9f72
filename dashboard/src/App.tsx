import { useEffect, useState } from 'preact/hooks';
import { getJson } from './api.js';
import { ErrorBox, Loading } from './components/bits.js';
import { CredentialsDialog } from './components/CredentialsDialog.js';
import { DeadPage } from './pages/DeadPage.js';
import { ItemPage } from './pages/ItemPage.js';
import { ItemsPage } from './pages/ItemsPage.js';
import { LanePage } from './pages/LanePage.js';
import { LanesPage } from './pages/LanesPage.js';
import { QueuesPage } from './pages/QueuesPage.js';
import { SchedulesPage } from './pages/SchedulesPage.js';
import { href, useRoute, type Route } from './router.js';
import { CREDENTIALS_EVENT, currentCredentials, forgetToken } from './session.js';
import { SessionContext } from './session-context.js';
import type { Session } from './types.js';

function Page({ route }: { route: Route }) {
  switch (route.page) {
    case 'queues':
      return <QueuesPage />;
    case 'items':
      return <ItemsPage queue={route.queue} filter={route.filter} after={route.after} />;
    case 'item':
      return <ItemPage id={route.id} />;
    case 'lanes':
      return <LanesPage queue={route.queue} />;
    case 'lane':
      return <LanePage queue={route.queue} lane={route.lane} after={route.after} />;
    case 'dead':
      return <DeadPage queue={route.queue} />;
    case 'schedules':
      return <SchedulesPage />;
    case 'missing':
      return <ErrorBox error={new Error(`No page at #${route.hash}`)} />;
  }
}

function Mode({ session }: { session: Session }) {
  const [, redraw] = useState(0);
  useEffect(() => {
    const onChange = (): void => redraw((n) => n + 1);
    addEventListener(CREDENTIALS_EVENT, onChange);
    return () => removeEventListener(CREDENTIALS_EVENT, onChange);
  }, []);
  if (!session.canAct)
    return (
      <span class="mode read-only" title="Started without --admin-token: nothing can be changed from here">
        read-only
      </span>
    );
  const creds = currentCredentials();
  if (creds === null) return <span class="mode can-act">actions enabled</span>;
  return (
    <span class="mode can-act">
      acting as <strong>{creds.name === '' ? 'operator' : creds.name}</strong>{' '}
      <button type="button" class="link" onClick={forgetToken}>
        forget token
      </button>
    </span>
  );
}

export function App() {
  const route = useRoute();
  const [session, setSession] = useState<Session | undefined>();
  const [error, setError] = useState<Error | undefined>();
  useEffect(() => {
    getJson<Session>('/api/session').then(setSession, (e: unknown) =>
      setError(e instanceof Error ? e : new Error(String(e))),
    );
  }, []);
  const section = route.page === 'dead' || route.page === 'schedules' ? route.page : 'queues';
  return (
    <SessionContext.Provider value={session ?? { canAct: false, showPayloads: false, version: '' }}>
      <header class="top">
        <a class="brand" href={href.queues()}>
          lanewake
        </a>
        <nav>
          <a href={href.queues()} class={section === 'queues' ? 'current' : ''}>
            Queues
          </a>
          <a href={href.dead()} class={section === 'dead' ? 'current' : ''}>
            Dead letters
          </a>
          <a href={href.schedules()} class={section === 'schedules' ? 'current' : ''}>
            Schedules
          </a>
        </nav>
        <div class="top-right">
          {session !== undefined && <Mode session={session} />}
          {session !== undefined && session.version !== '' && <span class="muted version">v{session.version}</span>}
        </div>
      </header>
      <main>
        <ErrorBox error={error} />
        {session === undefined && error === undefined ? <Loading /> : <Page route={route} />}
      </main>
      <CredentialsDialog />
    </SessionContext.Provider>
  );
}
