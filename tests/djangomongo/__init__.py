"""A Django project on MongoDB (django-mongodb-backend), for tests/contrib/test_django_mongodb.py."""
