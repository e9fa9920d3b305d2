"""Placeholder until the delivery worker lands: nothing runs in the background yet."""


class _Idle:
    def stop(self) -> None:
        pass


def start_background(engine, settings):
    return _Idle()
