from mongosched.contrib.django import app

from .models import Order


@app.task(name="shop.send_receipt")
def send_receipt(number: str) -> None: ...


@app.task(name="shop.ship", transactional=True)
def ship(number: str, fail: bool = False) -> None:
    Order.objects.filter(number=number).update(shipped=True)  # the ORM, in the job's transaction
    send_receipt.schedule(number)  # joins it too
    if fail:
        raise RuntimeError("the carrier refused")
