"""The host's own user model: signs in with an e-mail address, has no username."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.db import models


class MemberManager(BaseUserManager["Member"]):
    def create_user(self, email: str, password: str | None = None, **extra: Any) -> Member:
        member = self.model(email=self.normalize_email(email), **extra)
        member.set_password(password)
        member.save(using=self._db)
        return member

    def create_superuser(self, email: str, password: str | None = None, **extra: Any) -> Member:
        return self.create_user(email, password, is_staff=True, is_superuser=True, **extra)


class Member(AbstractBaseUser, PermissionsMixin):
    email = models.EmailField(unique=True, max_length=254)
    display_name = models.CharField(max_length=100, blank=True)
    is_staff = models.BooleanField(default=False)
    is_active = models.BooleanField(default=True)

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    objects = MemberManager()

    def __str__(self) -> str:
        return self.email
