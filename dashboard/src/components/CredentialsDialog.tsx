import { useEffect, useState } from 'preact/hooks';
import { lastName, setCredentialsAsker, type Credentials } from '../session.js';
import { Dialog } from './Dialog.js';

/** Asks for the admin token and the operator's name the first time an action needs them in this session. */
export function CredentialsDialog() {
  const [pending, setPending] = useState<((c: Credentials | null) => void) | null>(null);
  const [token, setToken] = useState('');
  const [name, setName] = useState('');

  useEffect(() => {
    setCredentialsAsker((done) => {
      setToken('');
      setName(lastName());
      setPending(() => done);
    });
    return () => setCredentialsAsker(null);
  }, []);

  if (pending === null) return null;
  const finish = (c: Credentials | null): void => {
    setPending(null);
    pending(c);
  };
  return (
    <Dialog title="Admin token" onClose={() => finish(null)}>
      <form
        class="form-stack"
        onSubmit={(e) => {
          e.preventDefault();
          if (token !== '') finish({ token, name: name.trim() });
        }}
      >
        <p class="muted">
          Actions need the token the dashboard was started with. It is kept in this tab only, until you close it.
        </p>
        <label>
          Token
          <input
            name="token"
            type="password"
            autocomplete="off"
            value={token}
            onInput={(e) => setToken(e.currentTarget.value)}
            required
          />
        </label>
        <label>
          <span>
            Your name <span class="muted">(written to the server's log with each action)</span>
          </span>
          <input name="actor" type="text" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </label>
        <div class="dialog-buttons">
          <button type="button" onClick={() => finish(null)}>
            Cancel
          </button>
          <button type="submit" class="primary">
            Continue
          </button>
        </div>
      </form>
    </Dialog>
  );
}
