import type { ComponentChildren } from 'preact';
import { useEffect, useRef } from 'preact/hooks';

/**
 * A modal box over the page; Escape or the backdrop closes it. Focus goes to its first field or
 * button once, when it opens.
 */
export function Dialog({
  title,
  onClose,
  children,
}: {
  title: string;
  onClose: () => void;
  children: ComponentChildren;
}) {
  const box = useRef<HTMLDivElement>(null);
  const close = useRef(onClose);
  close.current = onClose;
  useEffect(() => {
    const onKey = (e: KeyboardEvent): void => {
      if (e.key === 'Escape') close.current();
    };
    addEventListener('keydown', onKey);
    box.current?.querySelector<HTMLElement>('input, button.primary, button')?.focus();
    return () => removeEventListener('keydown', onKey);
  }, []);
  return (
    // biome-ignore lint/a11y/noStaticElementInteractions: Escape closes it through the window's keydown listener.
    // biome-ignore lint/a11y/useKeyWithClickEvents: Escape closes it through the window's keydown listener.
    <div class="backdrop" onClick={(e) => e.target === e.currentTarget && close.current()}>
      <div class="dialog" role="dialog" aria-modal="true" aria-label={title} ref={box}>
        <h2>{title}</h2>
        {children}
      </div>
    </div>
  );
}
